"""One rank of benchmarks/zero.py: the GPT trained for a few AdamW steps under each case (torch DDP and
FSDP2 over gloo, pycomm mbsgd and zero1/2/3), one after the other; rank 0 writes per case the samples/s
and the bytes of parameters + gradients + optimizer state each rank holds after a step (counted from the
live tensors: local shards for FSDP2). argv: OUT_JSON STEPS N_LAYER N_EMBD BLOCK CASES..."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

import algorithms
import pycomm
from algorithms.zero.memory import optimizer_tensors, storage_bytes
from apps.models.gpt import GPT

BATCH, VOCAB = 8, 65


def local(t: Any) -> Any:
    return t.to_local() if hasattr(t, "to_local") else t


def state_bytes(model: torch.nn.Module, opt: Any) -> int:
    if hasattr(opt, "memory_bytes"):
        return opt.memory_bytes()["total"]
    inner = getattr(opt, "optimizer", opt)
    seen: set[int] = set()
    params = list(model.parameters())
    return (storage_bytes([local(p) for p in params], seen) + storage_bytes([local(p.grad) for p in params], seen)
            + storage_bytes([local(t) for t in optimizer_tensors(inner)], seen))


def build(case: str, comm: Any, n_layer: int, n_embd: int, block: int) -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = GPT(vocab_size=VOCAB, block_size=block, n_layer=n_layer, n_head=max(1, n_embd // 64), n_embd=n_embd,
                dropout=0.0)
    if case in ("ddp", "fsdp2") and not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}",
                                rank=comm.rank, world_size=comm.size)
    if case == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)
    if case == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt = algorithms.CommOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-3), algorithm=case, comm=comm,
                                   model=model)
    return model, opt


def run(case: str, comm: Any, steps: int, n_layer: int, n_embd: int, block: int) -> dict[str, Any]:
    model, opt = build(case, comm, n_layer, n_embd, block)
    g = torch.Generator().manual_seed(comm.rank)
    data = torch.randint(0, VOCAB, (steps + 1, BATCH, block + 1), generator=g)
    measured = 0.0
    for t in range(steps + 1):        # step 0 is warm-up
        comm.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        logits = model(data[t, :, :-1])
        F.cross_entropy(logits.reshape(-1, VOCAB), data[t, :, 1:].reshape(-1)).backward()
        opt.step()
        comm.barrier()
        if t:
            measured += time.perf_counter() - t0
    return {"samples_per_s": steps * BATCH * comm.size / measured, "state_bytes": state_bytes(model, opt),
            "params": sum(p.numel() for p in GPT(vocab_size=VOCAB, block_size=block, n_layer=n_layer,
                                                 n_head=max(1, n_embd // 64), n_embd=n_embd).parameters())}


def main() -> None:
    torch.set_num_threads(1)
    pycomm.init()
    comm = pycomm.world()
    out, steps, n_layer, n_embd, block = sys.argv[1], *map(int, sys.argv[2:6])
    results = {}
    for case in sys.argv[6:]:
        try:
            results[case] = run(case, comm, steps, n_layer, n_embd, block)
        except Exception as e:      # a case the installed torch cannot run is reported, not fatal
            results[case] = {"error": f"{type(e).__name__}: {e}"}
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
