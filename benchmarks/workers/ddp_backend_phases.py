"""Where a DDP step's time goes on backend "pycomm" and on gloo (the profile behind the busy 2-rank figure of
benchmarks/ddp_backend.py): the same training as benchmarks/workers/ddp_backend_run.py, the backends
alternating, and per run the medians of forward+backward (DDP's all-reduces end inside backward) and of the
optimizer's step, plus, per thread of this rank (by name), the CPU seconds, the seconds runnable but waiting
for a core (schedstat) and the voluntary / involuntary context switches over the timed steps. Rank 0 prints
one JSON line per run. Linux only.

    python -m benchmarks.ddp_backend --profile --ranks 2 --loads busy     # beside a busy loop per core"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections import defaultdict

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from benchmarks.workers.ddp_tasks import DEFAULT_BATCH, MODELS, task

WARMUP = 5
TICK = os.sysconf("SC_CLK_TCK")


def threads() -> dict[str, list[float]]:
    """Per thread name of this process (Python's threads by their Python name: the OS names them all after
    the program): [CPU s, waiting-for-a-core s, voluntary, involuntary switches]."""
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for tid in os.listdir("/proc/self/task"):
        base = f"/proc/self/task/{tid}"
        try:
            name = python_names.get(int(tid)) or open(f"{base}/comm").read().strip()
            fields = open(f"{base}/stat").read().rsplit(")", 1)[1].split()
            wait_ns = int(open(f"{base}/schedstat").read().split()[1])
            status = dict(line.split(":", 1) for line in open(f"{base}/status") if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue
        row = out[name]
        row[0] += (int(fields[11]) + int(fields[12])) / TICK
        row[1] += wait_ns / 1e9
        row[2] += int(status["voluntary_ctxt_switches"])
        row[3] += int(status["nonvoluntary_ctxt_switches"])
    return out


def profile(group: dist.ProcessGroup, model_name: str, batches: list[torch.Tensor]) -> dict:
    work = task(model_name)
    model = DDP(work.make_model(), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    fwd_bwd, step_s = [], []
    for i, idx in enumerate(batches):
        if i == WARMUP:
            dist.barrier(group)
            before, t0 = threads(), time.perf_counter()
        a = time.perf_counter()
        opt.zero_grad()
        work.loss(model, idx).backward()
        b = time.perf_counter()
        opt.step()
        if i >= WARMUP:
            fwd_bwd.append(b - a)
            step_s.append(time.perf_counter() - b)
    wall, after = time.perf_counter() - t0, threads()
    per_thread = {
        name: [round(x - y, 3) for x, y in zip(now, before.get(name, [0.0] * 4))] for name, now in after.items()
    }
    return {
        "steps_per_s": (len(batches) - WARMUP) / wall,
        "fwd_bwd_ms": 1e3 * statistics.median(fwd_bwd),
        "opt_step_ms": 1e3 * statistics.median(step_s),
        "threads [cpu s, wait s, vol, invol]": per_thread,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=MODELS, default="mnist")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("pycomm")
    groups = {"pycomm": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    batches = task(args.model).batches(
        dist.get_rank(), dist.get_world_size(), DEFAULT_BATCH[args.model], WARMUP + args.steps
    )
    for repeat in range(args.repeats):
        for name, group in groups.items():
            got = profile(group, args.model, batches)
            if dist.get_rank() == 0:
                print(json.dumps({"repeat": repeat, "backend": name, **got}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
