"""One rank of benchmarks/nodes.py's torch peers: one of benchmarks/nodes_problem.py's problems (apps.train's
embedded default unless --problem says otherwise) under torch DDP over gloo,
or with --fsdp2 FSDP2 as HSDP on a 2-D DeviceMesh (replicas across the nodes, shards within a node), started
by torchrun (one per node). Every EVAL_EVERY steps and at the last, every rank scores the eval split (the
clock stopped: evaluation is no part of the method); rank 0 writes {"curve": [[step, seconds, eval loss]],
"train_s": seconds} to OUT and prints "done: STEPS steps in X.Xs" as apps.train does.
Usage: nodes_ddp STEPS EVAL_EVERY OUT [--fsdp2] [--problem NAME] [--seed K]"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist

from benchmarks.workers.nodes_loop import add_problem_options, initial_model, train, write


def wrap(model: torch.nn.Module, fsdp2: bool) -> torch.nn.Module:
    if not fsdp2:
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    local = int(os.environ["LOCAL_WORLD_SIZE"])
    mesh = init_device_mesh("cpu", (dist.get_world_size() // local, local), mesh_dim_names=("replicate", "shard"))
    return fully_shard(model, mesh=mesh)  # a 2-D mesh: replicate over dim 0, shard over dim 1 (HSDP)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("eval_every", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--fsdp2", action="store_true")
    add_problem_options(ap)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    model = wrap(initial_model(args), args.fsdp2)
    dist.barrier()
    # the step is over on every rank before the evaluation
    curve, clock = train(
        args.problem,
        model,
        args.problem.optimizer(model),
        args.steps,
        args.eval_every,
        rank,
        size,
        args.seed,
        dist.barrier,
    )
    if rank == 0:
        write(args.out, args.steps, curve, clock)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
