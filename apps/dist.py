"""The run's place among the ranks, through pycomm only (apps never re-implements communication).
Dist() without a communicator is one process on its own (used by tests of single-rank pieces)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Dist:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    comm: Any = None  # a pycomm Communicator, None when running alone without pycomm
    # ranks started as independent processes (fault-tolerant algorithms): no collectives between them
    independent: bool = False

    @classmethod
    def init(cls, backend: str = "auto") -> "Dist":
        """pycomm's world: the launcher's ranks, or one process (pycomm's local backend)."""
        import pycomm
        from algorithms.ps.layout import from_env

        layout = from_env()
        if layout is not None:  # apps.launch.spawn_independent or apps.ps started us: no MPI job
            pycomm.init(backend="local")
            return cls(layout.rank, layout.world, 0, None, independent=True)
        comm = pycomm.init(backend=backend)
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
