"""The run's place among the ranks, through pycomm only (apps never re-implements communication).

One process started without a launcher runs alone, with or without pycomm's compiled core."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from apps import launch


@dataclass
class Dist:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    comm: Any = None  # a pycomm Communicator, None when running alone without pycomm

    @classmethod
    def init(cls, backend: str = "auto") -> "Dist":
        env = launch.detect()
        try:
            import pycomm
            has_init = hasattr(pycomm, "init")
        except ImportError:
            has_init = False
        if not has_init:
            if env.size > 1:
                raise RuntimeError(f"started as rank {env.rank} of {env.size} by {env.launcher}, but pycomm.init "
                                   "is not available: build pycomm first (make build)")
            return cls()
        pycomm.init(backend=backend)
        comm = pycomm.world()
        return cls(comm.rank, comm.size, comm.local_rank, comm)

    def barrier(self) -> None:
        if self.comm is not None and self.size > 1:
            self.comm.barrier()

    def allreduce_sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        if self.comm is not None and self.size > 1:
            import pycomm
            self.comm.allreduce(t, op=pycomm.SUM)
        return t.tolist()

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on at least one (so all ranks stop at the same step)."""
        return self.allreduce_sum([1.0 if flag else 0.0])[0] > 0
