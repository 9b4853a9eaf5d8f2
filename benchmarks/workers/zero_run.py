"""One rank of benchmarks/zero.py: the GPT trained for a few AdamW steps under each case (torch DDP and
FSDP2 over gloo, pycomm mbsgd and zero1/2/3), REPEATS times, the cases in a shuffled order each repeat
(the same order on every rank) so that drift in the machine's load hits every case alike. Per run, rank 0
records the samples/s, the bytes of parameters + gradients + optimizer state each rank holds after a
step (counted from the live tensors: local shards for FSDP2), the peak memory during backward and the
machine's load. argv: OUT_JSON STEPS N_LAYER N_EMBD BLOCK REPEATS SEED CASES...

The peak during backward is measured in one more, untimed step: the most bytes malloc had handed
out at once during its backward (glibc mallinfo2, sampled every 0.2 ms) less those at its start, the
largest over ranks: what backward adds on top of the model, its state and the forward's activations
(full gradients that live until they are reduced, communication buffers), whether or not the
allocator reuses pages it kept."""

from __future__ import annotations

import ctypes
import gc
import os
import random
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

import algorithms
import pycomm
from algorithms.zero.memory import optimizer_tensors, storage_bytes
from apps.models.gpt import GPT
from benchmarks.busy_load import machine_load
from benchmarks.workers.rank0_result import write_result_and_close

BATCH, VOCAB = 8, 65


def local(t: Any) -> Any:
    return t.to_local() if hasattr(t, "to_local") else t


def state_bytes(model: torch.nn.Module, opt: Any) -> int:
    if hasattr(opt, "memory_bytes"):
        return opt.memory_bytes()["total"]
    inner = getattr(opt, "optimizer", opt)
    seen: set[int] = set()
    params = list(model.parameters())
    return (
        storage_bytes([local(p) for p in params], seen)
        + storage_bytes([local(p.grad) for p in params], seen)
        + storage_bytes([local(t) for t in optimizer_tensors(inner)], seen)
    )


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def live_heap_bytes() -> int:
    """Bytes malloc has handed out and not had back (glibc mallinfo2: arena chunks in use + mmapped
    blocks): every tensor and communication buffer of the process, whatever the allocator keeps."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


class PeakSampler(threading.Thread):
    """The highest live_heap_bytes() seen while running (sampled every 0.2 ms from a thread of its own:
    backward runs in torch's engine without the GIL)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self._stop_event = live_heap_bytes(), threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, live_heap_bytes())
            time.sleep(0.0002)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return max(self.peak, live_heap_bytes())


def build(case: str, comm: Any, n_layer: int, n_embd: int, block: int) -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = GPT(
        vocab_size=VOCAB, block_size=block, n_layer=n_layer, n_head=max(1, n_embd // 64), n_embd=n_embd, dropout=0.0
    )
    if case in ("ddp", "fsdp2") and not dist.is_initialized():
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}", rank=comm.rank, world_size=comm.size
        )
    if case == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)
    if case == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt = algorithms.CommOptimizer(
        torch.optim.AdamW(model.parameters(), lr=1e-3), algorithm=case, comm=comm, model=model
    )
    return model, opt


def run(case: str, comm: Any, steps: int, n_layer: int, n_embd: int, block: int) -> dict[str, Any]:
    model, opt = build(case, comm, n_layer, n_embd, block)
    g = torch.Generator().manual_seed(comm.rank)
    data = torch.randint(0, VOCAB, (steps + 2, BATCH, block + 1), generator=g)
    measured = 0.0
    for t in range(steps + 1):  # step 0 is warm-up
        comm.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        logits = model(data[t, :, :-1])
        F.cross_entropy(logits.reshape(-1, VOCAB), data[t, :, 1:].reshape(-1)).backward()
        opt.step()
        comm.barrier()
        if t:
            measured += time.perf_counter() - t0
    # one more step, untimed: backward's peak of live heap bytes over those at its start
    opt.zero_grad()
    logits = model(data[steps + 1, :, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), data[steps + 1, :, 1:].reshape(-1))
    start, sampler = live_heap_bytes(), PeakSampler()
    sampler.start()
    loss.backward()
    peak = torch.tensor([float(sampler.stop() - start)], dtype=torch.float64)
    opt.step()
    comm.allreduce(peak, op=pycomm.MAX)
    result = {
        "samples_per_s": steps * BATCH * comm.size / measured,
        "state_bytes": state_bytes(model, opt),
        "params": sum(
            p.numel()
            for p in GPT(
                vocab_size=VOCAB, block_size=block, n_layer=n_layer, n_head=max(1, n_embd // 64), n_embd=n_embd
            ).parameters()
        ),
    }
    result["backward_peak_bytes"] = int(peak.item())
    if hasattr(opt, "remove_hooks"):
        opt.remove_hooks()
    del model, opt
    gc.collect()
    return result


def main() -> None:
    torch.set_num_threads(1)
    pycomm.init()
    comm = pycomm.world()
    out, steps, n_layer, n_embd, block, repeats, seed = sys.argv[1], *map(int, sys.argv[2:8])
    cases = sys.argv[8:]
    runs = []
    for repeat in range(repeats):
        order = list(cases)
        random.Random(seed + repeat).shuffle(order)  # the same order on every rank
        for case in order:
            load = machine_load()
            try:
                r = run(case, comm, steps, n_layer, n_embd, block)
            except Exception as e:  # a case the installed torch cannot run is reported, not fatal
                r = {"error": f"{type(e).__name__}: {e}"}
            runs.append({"repeat": repeat, "case": case, **load, **r})
            if comm.rank == 0:
                print(f"repeat {repeat} {case}: {r.get('samples_per_s', float('nan')):.1f} samples/s", flush=True)
    write_result_and_close(comm, out, runs, indent=1)


if __name__ == "__main__":
    main()
