"""One rank of benchmarks/nodes.py's torchft peers: one of benchmarks/nodes_problem.py's problems under torchft's
DiLoCo (the problem's 3 fragments, every SYNC steps, one step of delay, mixing 0.5, outer SGD lr 0.7 momentum 0.9
Nesterov; fp32: torchft quantizes with Triton kernels, on CUDA only) or LocalSGD (averaging every SYNC steps).
Each node is one replica group (a torchrun --standalone per node); node 0's first rank runs the Lighthouse.
Scoring and output as nodes_ddp.py.
Usage: nodes_torchft STEPS EVAL_EVERY OUT {diloco,localsgd} SYNC [--nodes N] [--problem NAME] [--seed K]"""

from __future__ import annotations

import argparse
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import torch

from benchmarks.workers.nodes_loop import add_problem_options, initial_model, train, write

LIGHTHOUSE_PORT = 29510
LIGHTHOUSE_HOST = "node0"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("eval_every", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("method", choices=["diloco", "localsgd"])
    ap.add_argument("sync", type=int)
    ap.add_argument("--nodes", type=int, default=2)
    add_problem_options(ap)
    args = ap.parse_args()
    from torchft import Manager, ProcessGroupGloo
    from torchft.coordination import LighthouseServer
    from torchft.local_sgd import DiLoCo, LocalSGD

    host = socket.gethostname()
    node, rank = int(host.removeprefix("node")), int(os.environ["RANK"])
    lighthouse = (
        LighthouseServer(bind=f"0.0.0.0:{LIGHTHOUSE_PORT}", min_replicas=args.nodes)
        if node == 0 and rank == 0
        else None
    )
    model = initial_model(args)
    opt = args.problem.optimizer(model)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=120)),
        min_replica_size=args.nodes,
        use_async_quorum=False,  # DiLoCo requires it; LocalSGD alike, for the same loop
        load_state_dict=lambda s: model.load_state_dict(s["model"]),
        state_dict=lambda: {"model": model.state_dict()},
        replica_id=f"node{node}",
        lighthouse_addr=f"http://{LIGHTHOUSE_HOST}:{LIGHTHOUSE_PORT}",
        hostname=host,
        timeout=timedelta(seconds=120),
        quorum_timeout=timedelta(seconds=120),
        connect_timeout=timedelta(seconds=120),
    )
    if args.method == "diloco":
        fragments = args.problem.fragments(model)
        outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in fragments]
        wrapper = DiLoCo(
            manager, fragments, opt, outer, sync_every=args.sync, fragment_sync_delay=1, fragment_update_alpha=0.5
        )
    else:
        wrapper = LocalSGD(manager, model, opt, sync_every=args.sync)
    # the global rank across replica groups: node k's ranks after the nodes before it
    world_rank = node * int(os.environ["WORLD_SIZE"]) + rank
    world = args.nodes * int(os.environ["WORLD_SIZE"])
    with wrapper:
        curve, clock = train(args.problem, model, opt, args.steps, args.eval_every, world_rank, world, args.seed)
    if node == 0 and rank == 0:
        write(args.out, args.steps, curve, clock)
    manager.shutdown(wait=False)
    if lighthouse is not None:
        time.sleep(2)  # the other replica's last quorum call
        lighthouse.shutdown()


if __name__ == "__main__":
    main()
