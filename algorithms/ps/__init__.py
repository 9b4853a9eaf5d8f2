"""Fault-tolerant data parallelism over ZeroMQ: parameter servers (asyncps, syncps) and bounded-staleness
all-reduce without a server (ssp). Importing the package registers the three algorithms."""

from algorithms.ps.optimizers import AsyncPS, SyncPS
from algorithms.ps.ssp import SSP

__all__ = ["AsyncPS", "SyncPS", "SSP"]
