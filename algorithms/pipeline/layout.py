"""The 2-D layout of pipeline x data parallelism: comm.size = stages x replicas. Each replica's pipeline
is a block of consecutive ranks (rank = replica * stages + stage), so neighbouring stages sit on
neighbouring ranks (usually one node) and a stage's replicas are `stages` ranks apart."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class Layout:
    stages: int
    replicas: int
    stage: int
    replica: int
    pipeline_comm: Any           # the stages of this replica (rank = stage)
    replica_comm: Any            # this stage's replicas (rank = replica)
    fwd_comm: Optional[Any]      # duplicates of pipeline_comm for activations ...
    bwd_comm: Optional[Any]      # ... and for their gradients

    @classmethod
    def build(cls, comm: Any, data_parallel: Any) -> "Layout":
        if isinstance(data_parallel, bool) or not isinstance(data_parallel, int) or data_parallel < 1:
            raise ValueError(f"Pipeline: data_parallel must be a positive int (replicas of the pipeline), "
                             f"got {data_parallel!r}")
        if comm.size % data_parallel:
            raise ValueError(f"Pipeline: data_parallel={data_parallel} must divide the communicator's "
                             f"{comm.size} ranks (stages = ranks / data_parallel)")
        stages = comm.size // data_parallel
        stage, replica = comm.rank % stages, comm.rank // stages
        pipeline_comm = comm.split(replica, stage)
        replica_comm = comm.split(stage, replica)
        fwd = pipeline_comm.dup() if stages > 1 else None
        bwd = pipeline_comm.dup() if stages > 1 else None
        return cls(stages, data_parallel, stage, replica, pipeline_comm, replica_comm, fwd, bwd)
