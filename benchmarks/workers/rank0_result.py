"""The end of a benchmark worker: rank 0 writes the result file its launcher reads, then the torch
process group (made for the DDP baselines) is closed, so no rank exits with it open.

Free every DDP model before calling it: a DDP reducer that outlives the group holds its last reference,
and freed later with the GIL held it destroys the gloo group, whose destructor joins a work thread that
waits for the GIL (pytorch/pytorch#56297; a rank then never exits)."""

from __future__ import annotations

import gc
import json
from typing import Any

import torch.distributed as dist


def write_result_and_close(comm: Any, out: str, result: Any, indent: int | None = None) -> None:
    """Rank 0 of `comm` writes `result` as JSON to `out`; every rank then destroys the torch process
    group when one was initialized."""
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(result, f, indent=indent)
    if dist.is_initialized():
        gc.collect()  # DDP models the caller dropped but a reference cycle still holds
        dist.destroy_process_group()
