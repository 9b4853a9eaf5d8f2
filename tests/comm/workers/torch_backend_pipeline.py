"""Worker of tests/comm/test_torch_backend_pipeline.py: torch.distributed.pipelining's 1F1B schedule on 2 or 4
ranks (one stage each), unchanged, on backend "pycomm" (its stages' sends and receives) against the same run on
gloo."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

import pycomm
from tests.comm.workers.torch_backend_models import mlp, same

STEPS, MICROBATCHES = 3, 4
# where each stage's layers of the MLP (Linear, ReLU, Linear, ReLU, Linear) begin and end, by stage count
BOUNDS = {2: (0, 2, 5), 4: (0, 1, 3, 4, 5)}


def run(group: dist.ProcessGroup) -> list[torch.Tensor]:
    """This rank's stage (its layers of the MLP) after STEPS steps of 1F1B over `group`."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    bounds = BOUNDS[size]
    part = mlp()[bounds[rank] : bounds[rank + 1]]
    stage = PipelineStage(part, rank, size, torch.device("cpu"), group=group)
    schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.cross_entropy)
    params = list(part.parameters())
    opt = torch.optim.SGD(params, lr=0.1) if params else None  # a ReLU stage has none
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)  # one batch per step, the same on every stage
        x, y = torch.randn(4 * MICROBATCHES, 16, generator=g), torch.randint(0, 4, (4 * MICROBATCHES,), generator=g)
        if opt is not None:
            opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == size - 1:
            schedule.step(target=y)
        else:
            schedule.step()
        if opt is not None:
            opt.step()
    return [p.detach().clone() for p in part.parameters()]


if __name__ == "__main__":
    dist.init_process_group("pycomm")
    before = pycomm.stats().get("send", {}).get("calls", 0)
    on_pycomm = run(dist.group.WORLD)
    sends = pycomm.stats()["send"]["calls"] - before
    on_gloo = run(dist.new_group(backend="gloo"))
    same(on_pycomm, on_gloo, "1F1B on pycomm vs gloo")
    assert sends >= STEPS * MICROBATCHES, f"expected the stages' sends to run through pycomm, saw {sends}"
    print(f"rank {dist.get_rank()}: 1f1b on pycomm == gloo after {STEPS} steps ({sends} pycomm sends)", flush=True)
    dist.destroy_process_group()
