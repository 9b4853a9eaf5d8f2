"""ZeRO sharding (stages 1, 2, 3; hybrid): `CommOptimizer(opt, algorithm="zero2", ...)`. See
algorithms/zero/sharded.py for what the stages share, stages.py for stages 1 and 2, stage3.py for 3,
sharded_state.py for full and sharded (reshardable) checkpoints."""

from __future__ import annotations

from algorithms.zero.sharded import ZeroOptimizer
from algorithms.zero.stage3 import ZeRO3
from algorithms.zero.stages import ZeRO1, ZeRO2

__all__ = ["ZeroOptimizer", "ZeRO1", "ZeRO2", "ZeRO3"]
