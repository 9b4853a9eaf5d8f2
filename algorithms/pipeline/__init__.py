"""Pipeline model parallelism: `algorithms.Pipeline` (pipeline.py), built from the stage split
(partition.py), the schedules as per-stage action lists (pipeline_schedules.py), the executor that runs one
(executor.py) over links between neighbouring stages (links.py) and the slot-counted bubble (timeline.py).
Stages and replicas come from a pycomm.Mesh (mesh["pp"], mesh["dp"])."""

from __future__ import annotations

from algorithms.pipeline.pipeline import Pipeline
from algorithms.pipeline.pipeline_schedules import SCHEDULES, Action, action_list, compute_order
from algorithms.pipeline.timeline import expected_bubble, slot_bubble

__all__ = ["Pipeline", "SCHEDULES", "Action", "action_list", "compute_order", "expected_bubble", "slot_bubble"]
