"""One rank of benchmarks/nodes.py's torchft peers: the problem of nodes_ddp.py (SmallCNN on the embedded MNIST,
batch 32 per rank, SGD lr 0.05 momentum 0.9, cosine over STEPS) under torchft's DiLoCo (3 fragments: the two
convolutions and the classifier, every SYNC steps, one step of delay, mixing 0.5, outer SGD lr 0.7 momentum 0.9
Nesterov; fp32: torchft quantizes with Triton kernels, on CUDA only) or LocalSGD (averaging every SYNC steps).
Each node is one replica group (a torchrun --standalone per node); node 0's first rank runs the Lighthouse.
Scoring and output as nodes_ddp.py. Usage: nodes_torchft STEPS EVAL_EVERY OUT {diloco,localsgd} SYNC"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F

from algorithms.schedules import CosineWithWarmup
from apps.data import idx
from apps.models import SmallCNN
from benchmarks.workers.nodes_ddp import BATCH, eval_loss

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
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = CosineWithWarmup(opt, args.steps)
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
        fragments = [model.features[0], model.features[3], model.classifier]
        outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in fragments]
        wrapper = DiLoCo(
            manager, fragments, opt, outer, sync_every=args.sync, fragment_sync_delay=1, fragment_update_alpha=0.5
        )
    else:
        wrapper = LocalSGD(manager, model, opt, sync_every=args.sync)
    splits = idx.load()
    # the global rank across replica groups: node k's ranks after the nodes before it
    world_rank = node * int(os.environ["WORLD_SIZE"]) + rank
    world = args.nodes * int(os.environ["WORLD_SIZE"])
    mine = torch.arange(world_rank, len(splits.train), world)
    curve, clock = [], 0.0
    with wrapper:
        for step in range(1, args.steps + 1):
            start = time.perf_counter()
            at = ((step - 1) * BATCH) % (len(mine) - BATCH)
            x, y = splits.train.batch(mine[at : at + BATCH])[:2]
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
            clock += time.perf_counter() - start
            if step % args.eval_every == 0 or step == args.steps:
                curve.append((step, clock, eval_loss(model, splits.eval)))
    if node == 0 and rank == 0:
        args.out.write_text(json.dumps({"curve": curve, "train_s": clock}))
        print(f"done: {args.steps} steps in {clock:.1f}s", flush=True)
    manager.shutdown(wait=False)
    if lighthouse is not None:
        time.sleep(2)  # the other replica's last quorum call
        lighthouse.shutdown()


if __name__ == "__main__":
    main()
