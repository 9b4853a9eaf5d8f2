"""Worker of benchmarks/ddp_hooks_link.py (mpirun across the emulated nodes): DDP with fp32 gradients against
DDP with pycomm's quantized communication hooks (pycomm/ddp_hooks.py), on the torch.distributed backend
"pycomm" and on a gloo group, from the same initial model over the same batches. The cases alternate repeat
by repeat (load drift hits each alike); each reports samples/s of the slowest rank, the mean training loss of
its last steps over every rank, and the bytes its hook encoded per step.

    python -m benchmarks.workers.ddp_hooks_link_run --model mnist --steps 40 --repeats 2 --out rows.json"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pycomm
from benchmarks.workers.ddp_tasks import DEFAULT_BATCH, MODELS, Task, task
from benchmarks.workers.rank0_result import write_result_and_close
from pycomm import ddp_hooks

WARMUP = 3
LAST = 5  # the final loss: the mean over ranks of the last LAST steps' losses
CODECS = ("fp32", "int8", "1bit")


def run(work: Task, group: dist.ProcessGroup, codec: str, batches: list[torch.Tensor]) -> dict[str, Optional[float]]:
    """One training run of DDP on `group`, its gradients all-reduced in fp32 or through `codec`'s hook."""
    model = DDP(work.make_model(), process_group=group)
    state = None
    if codec != "fp32":
        state = ddp_hooks.QuantizedState(codec, process_group=group)
        model.register_comm_hook(state, ddp_hooks.quantized_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses: list[float] = []
    t0 = 0.0
    for step, idx in enumerate(batches):
        if step == WARMUP:
            dist.barrier(group)
            t0 = time.perf_counter()
        opt.zero_grad()
        loss = work.loss(model, idx)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    elapsed = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's time
    final = torch.tensor([sum(losses[-LAST:]) / LAST])
    dist.all_reduce(final, op=dist.ReduceOp.SUM, group=group)
    size = dist.get_world_size(group)
    timed = batches[WARMUP:]
    wire = None if state is None else state.wire_bytes / len(batches)
    model = opt = state = None  # DDP's reducer freed before the next run (and before the group closes)
    gc.collect()
    return {
        "samples_per_s": sum(len(i) for i in timed) * size / elapsed.item(),
        "final_loss": final.item() / size,
        "wire_bytes_per_step": wire,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=MODELS, default="mnist")
    p.add_argument("--steps", type=int, default=40, help="steps per run, the first 3 untimed")
    p.add_argument("--batch", type=int, help="samples per rank and step (default: the model's)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--codecs", nargs="+", choices=CODECS, default=list(CODECS))
    p.add_argument("--backends", nargs="+", choices=("pycomm", "gloo"), default=["pycomm", "gloo"])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.steps <= WARMUP + LAST:
        p.error(f"--steps {args.steps}: expected more than {WARMUP + LAST} (warm-up and final-loss steps)")
    dist.init_process_group("pycomm")
    groups = {"pycomm": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    work = task(args.model)
    batches = work.batches(dist.get_rank(), dist.get_world_size(), args.batch or DEFAULT_BATCH[args.model], args.steps)
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for backend in args.backends:
            for codec in args.codecs:
                runs.setdefault(f"{backend} {codec}", []).append(run(work, groups[backend], codec, batches))
    write_result_and_close(pycomm.world(), args.out, runs)


if __name__ == "__main__":
    main()
