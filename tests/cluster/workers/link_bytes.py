"""On the emulated cluster (benchmarks/cluster.py), 2 nodes x 2 ranks under mpirun: the bytes a method's
comm_stats() says cross nodes (`bytes_across_nodes`) against the bytes that left each node through its link
(nic0's tx counter, read inside the node's namespace), over a window of training steps, and the same for an
all-reduce of a known size over the nodes (the calibration: what TCP/IP and MPI add to a payload).

Each window: barrier, node counters read, barrier (no rank sends before both nodes have read), the work,
barrier, counters read. Rank 0 prints one JSON line "link bytes: {...}" with, per window (idle: none but the
barriers; calibration; each method's training), every node's bytes out and the bytes its ranks'
comm_stats() said they put across nodes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

import algorithms
import pycomm
from pycomm import SUM

NIC = Path("/sys/class/net/nic0/statistics")  # the node's end of its link (sysfs of the node's namespace)
WIDTH = 512  # the model: two 512 x 512 layers, about 2 MiB of fp32 parameters
CALIBRATION = 2 << 20  # bytes all-reduced over the nodes in the calibration window


def node_tx() -> int:
    return int((NIC / "tx_bytes").read_text())


def build(method: str, model: nn.Module, mesh: pycomm.Mesh) -> Any:
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    if method == "mbsgd":
        return algorithms.CommOptimizer(sgd, algorithm="mbsgd", mesh=mesh, model=model)
    zero = algorithms.CommOptimizer(sgd, algorithm="zero2", mesh=mesh, model=model)
    if method == "zero2":  # HSDP: reduce-scatter in the node, the shard averaged across the nodes
        return zero
    # DiLoCo across the nodes over ZeRO-2's master shards: a round every 2 inner steps
    return algorithms.CommOptimizer(zero, algorithm="diloco", mesh=mesh, model=model, inner_steps=2, outer_lr=0.7)


def window(world: pycomm.Communicator, local: int, work: Callable[[], int]) -> list[dict[str, int]]:
    """[{"out": bytes out of node k's link, "said": what its ranks' comm_stats said crossed}, ...] for `work`
    (which returns what this rank's comm_stats says it put across nodes)."""
    world.barrier()
    before = node_tx() if local == 0 else 0
    world.barrier()
    said = work()
    world.barrier()
    out = node_tx() - before if local == 0 else 0
    rows = torch.empty(world.size * 2, dtype=torch.int64)
    world.allgather(rows, torch.tensor([out, said], dtype=torch.int64))
    per_rank = rows.view(world.size, 2).tolist()
    nodes = world.size // 2
    return [
        {
            "out": sum(per_rank[r][0] for r in range(2 * k, 2 * k + 2)),
            "said": sum(per_rank[r][1] for r in range(2 * k, 2 * k + 2)),
        }
        for k in range(nodes)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", default="mbsgd,zero2,diloco")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    world = pycomm.init()
    mesh = pycomm.Mesh.across_nodes(world)
    assert mesh.shape == {"pp": 1, "dp_replicate": 2, "dp_shard": 2}, repr(mesh)
    local = mesh.coords["dp_shard"]

    def calibration() -> int:
        mesh["dp_replicate"].allreduce(torch.ones(CALIBRATION // 4), op=SUM)
        return CALIBRATION  # an all-reduce over 2 ranks sends each rank's payload once

    report: dict[str, Any] = {
        "steps": args.steps,
        "idle": window(world, local, lambda: 0),
        "calibration": window(world, local, calibration),
    }
    for method in args.methods.split(","):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))
        opt = build(method, model, mesh)
        data = torch.randn(16, WIDTH, generator=torch.Generator().manual_seed(world.rank))

        def steps(n: int) -> int:
            before = opt.comm_stats()["bytes_across_nodes"]
            for _ in range(n):
                opt.zero_grad()
                model(data).square().mean().backward()
                opt.step()
            return opt.comm_stats()["bytes_across_nodes"] - before

        steps(2)  # a round of every method before the window: what happens once (buckets, state) stays out
        report[method] = {
            "training": window(world, local, lambda: steps(args.steps)),
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        }
    if world.rank == 0:
        print("link bytes: " + json.dumps(report), flush=True)
    world.barrier()


if __name__ == "__main__":
    main()
