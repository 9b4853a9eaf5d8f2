"""One rank of benchmarks/composition.py: the char GPT (untied head, so every layout trains the same model)
trained for a few AdamW steps on 4 ranks in each layout, one after the other: pycomm on a pycomm.Mesh
(pipeline stages, ZeRO shards, replicas, a method across them) and torch's own compositions over gloo
(DDP; FSDP2 fully_shard on a 2-D mesh, i.e. HSDP; torch.distributed.pipelining's Schedule1F1B with each
stage in DDP over its replicas). Rank 0 writes per layout: samples/s, per rank the bytes of parameters +
gradients + optimizer state after a step and the peak of live activations during one (autograd's saved
tensors), and pycomm's bytes per step per mesh dimension.
The layouts run one after the other, the whole sequence REPEATS times (a change in the shared machine's
load falls on all of them alike): samples/s is the median over the repeats (with min and max).
argv: OUT_JSON REPEATS STEPS N_LAYER N_EMBD BLOCK BATCH MICROBATCHES LAYOUTS..."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import weakref
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import algorithms
import pycomm
from algorithms.pipeline.partition import layers_of, stage_bounds, stage_module
from algorithms.zero.memory import optimizer_tensors, storage_bytes
from apps.models.gpt import GPT

VOCAB = 65
# name -> (mesh sizes pp, dp_replicate, dp_shard; what runs on it)
PYCOMM = {
    "mbsgd": ((1, 1, 4), "mbsgd"),
    "zero3": ((1, 1, 4), "zero3"),
    "hsdp_zero2": ((1, 2, 2), "zero2"),
    "hsdp_zero3": ((1, 2, 2), "zero3"),
    "zero3_in_plsgd_across": ((1, 2, 2), "zero3+plsgd"),
    "pp2_mbsgd": ((2, 2, 1), "mbsgd"),
    "pp2_zero1": ((2, 1, 2), "zero1"),
    "pp2_zero2": ((2, 1, 2), "zero2"),
    "pp2_zero3": ((2, 1, 2), "zero3"),
}
TORCH = ("torch_ddp", "torch_fsdp2_hsdp", "torch_pp2_1f1b_ddp")
LAYOUTS = tuple(PYCOMM) + TORCH


@dataclass
class Built:
    module: nn.Module  # what this rank trains (the stage, or the model)
    opt: Any
    step: Callable[[torch.Tensor, torch.Tensor], None]  # forward + backward of this rank's batch
    dp: int  # data-parallel ranks (the global batch is dp x batch)
    stats: Callable[[], dict[str, int]] = dict  # pycomm's bytes per mesh dimension so far


def gpt(a: Any) -> GPT:
    torch.manual_seed(0)
    return GPT(
        vocab_size=VOCAB,
        block_size=a.block,
        n_layer=a.n_layer,
        n_head=max(1, a.n_embd // 64),
        n_embd=a.n_embd,
        dropout=0.0,
        tie_weights=False,
    )


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def adamw(module: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(module.parameters(), lr=1e-3)


def merged_bytes(*parts: Any) -> Callable[[], dict[str, int]]:
    def stats() -> dict[str, int]:
        out: dict[str, int] = {}
        for part in parts:
            for dim, n in part.comm_stats().get("bytes_by_dim", {}).items():
                out[dim] = out.get(dim, 0) + n
        return out

    return stats


def build_pycomm(name: str, comm: Any, a: Any) -> Built:
    (pp, rep, shard), method = PYCOMM[name]
    mesh = pycomm.Mesh(comm, pp=pp, dp_replicate=rep, dp_shard=shard)
    model = gpt(a)
    if pp > 1:
        pipe = algorithms.Pipeline(model.pipeline_layers(), mesh=mesh, schedule="1f1b", microbatches=a.microbatches)
        opt = algorithms.CommOptimizer(adamw(pipe.stage_module), algorithm=method, mesh=mesh, model=pipe.stage_module)

        def step(x: torch.Tensor, y: torch.Tensor) -> None:
            pipe.train_step(
                x if pipe.is_first else None, y if pipe.is_last else None, lm_loss if pipe.is_last else None
            )

        return Built(pipe.stage_module, opt, step, mesh["dp"].size, merged_bytes(opt, pipe))
    inner, _, outer = method.partition("+")
    opt = algorithms.CommOptimizer(adamw(model), algorithm=inner, mesh=mesh, model=model)
    if outer:
        opt = algorithms.CommOptimizer(opt, algorithm=outer, mesh=mesh, model=model, averaging_freq=6)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        lm_loss(model(x), y).backward()

    return Built(model, opt, step, mesh["dp"].size, merged_bytes(opt))


def torch_groups(comm: Any, sizes: list[list[int]]) -> list[Any]:
    """torch subgroups for every group in `sizes` (every rank makes them all, in order); this rank's ones."""
    mine = []
    for ranks in sizes:
        g = dist.new_group(ranks)
        if comm.rank in ranks:
            mine.append(g)
    return mine


def build_torch(name: str, comm: Any, a: Any) -> Built:
    model = gpt(a)

    def plain(module: nn.Module) -> Callable[[torch.Tensor, torch.Tensor], None]:
        return lambda x, y: lm_loss(module(x), y).backward()

    if name == "torch_ddp":
        ddp = nn.parallel.DistributedDataParallel(model)
        return Built(model, adamw(model), plain(ddp), comm.size)
    if name == "torch_fsdp2_hsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return Built(model, adamw(model), plain(model), comm.size)
    # pp2 x DDP over 2 replicas: the stages 2 ranks apart, as pycomm's Mesh(pp=2, dp_replicate=2) lays them out
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    pp_group = torch_groups(comm, [[0, 2], [1, 3]])[0]
    dp_group = torch_groups(comm, [[0, 1], [2, 3]])[0]
    stage_index = comm.rank // 2
    layers = layers_of(model.pipeline_layers())
    mod = stage_module(layers, stage_bounds(layers, 2), stage_index)
    ddp = nn.parallel.DistributedDataParallel(mod, process_group=dp_group)
    stage = PipelineStage(ddp, stage_index, 2, device=torch.device("cpu"), group=pp_group)
    schedule = Schedule1F1B(stage, n_microbatches=a.microbatches, loss_fn=lm_loss)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        if stage_index == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])

    return Built(mod, adamw(mod), step, 2)


class ActivationMeter:
    """The peak bytes of autograd's saved tensors alive at once (activations; parameters and their views
    excluded), each storage once: what a step holds for its backward passes."""

    def __init__(self) -> None:
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, references]
        self.now = self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.live[key]

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if isinstance(base, nn.Parameter) or (base.is_leaf and base.requires_grad) or t.numel() == 0:
            return t
        storage = t.untyped_storage()
        key = storage.data_ptr()
        entry = self.live.setdefault(key, [storage.nbytes(), 0])
        if entry[1] == 0:
            self.now += entry[0]
            self.peak = max(self.peak, self.now)
        entry[1] += 1
        weakref.finalize(t, self._release, key)
        return t

    def hooks(self) -> Any:
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)


def local(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return t.to_local() if t is not None and hasattr(t, "to_local") else t


def state_bytes(b: Built) -> int:
    """Parameters + gradients + optimizer state this rank holds (live tensors, each storage once)."""
    if hasattr(b.opt, "memory_bytes"):
        return b.opt.memory_bytes()["total"]
    seen: set[int] = set()
    params = list(b.module.parameters())
    opt = getattr(b.opt, "torch_optimizer", b.opt)
    return (
        storage_bytes([local(p) for p in params], seen)
        + storage_bytes([local(p.grad) for p in params], seen)
        + storage_bytes([local(t) for t in optimizer_tensors(opt)], seen)
    )


def run(name: str, comm: Any, a: Any) -> dict[str, Any]:
    b = build_pycomm(name, comm, a) if name in PYCOMM else build_torch(name, comm, a)
    g = torch.Generator().manual_seed(comm.rank)
    data = torch.randint(0, VOCAB, (a.steps + 1, a.batch, a.block + 1), generator=g)
    meter, seconds, before = ActivationMeter(), 0.0, {}
    for t in range(a.steps + 1):  # step 0 is warm-up (and the activation measurement)
        comm.barrier()
        t0 = time.perf_counter()
        b.opt.zero_grad()
        with meter.hooks() if t == 0 else torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):
            b.step(data[t, :, :-1], data[t, :, 1:])
        b.opt.step()
        comm.barrier()
        if t:
            seconds += time.perf_counter() - t0
        else:
            before = b.stats()
    after = b.stats()
    state = state_bytes(b)
    return {
        "samples_per_s": a.steps * a.batch * b.dp / seconds,
        "state_bytes": state,
        "activation_peak_bytes": meter.peak,
        "peak_bytes": state + meter.peak,
        "bytes_per_step": {d: (after.get(d, 0) - before.get(d, 0)) // a.steps for d in after} or None,
    }


def main() -> None:
    torch.set_num_threads(1)
    pycomm.init()
    comm = pycomm.world()

    repeats, steps, n_layer, n_embd, block, batch, microbatches = map(int, sys.argv[2:9])
    a = SimpleNamespace(
        out=sys.argv[1],
        steps=steps,
        n_layer=n_layer,
        n_embd=n_embd,
        block=block,
        batch=batch,
        microbatches=microbatches,
    )
    names = sys.argv[9:]
    if comm.size != 4:
        raise SystemExit(f"benchmarks.composition runs on 4 ranks, got {comm.size}")
    if any(n in TORCH for n in names):
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}", rank=comm.rank, world_size=comm.size
        )
    results: dict[str, Any] = {}
    speeds: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names:
            try:
                mine = run(name, comm, a)
            except Exception as e:  # a layout the installed torch cannot run is reported, not fatal
                mine = {"error": f"{type(e).__name__}: {e}"}
            if "samples_per_s" in mine:
                speeds[name].append(mine["samples_per_s"])
            if repeat:
                continue
            # per rank: the largest memory over the ranks (stages differ), rank 0's speed and bytes
            keys = ("state_bytes", "activation_peak_bytes", "peak_bytes")
            peaks = torch.tensor([float(mine.get(k, 0)) for k in keys], dtype=torch.float64)
            comm.allreduce(peaks, op=pycomm.MAX)
            if "error" not in mine:
                mine.update({f"max_{k}": int(v) for k, v in zip(keys, peaks.tolist())})
            results[name] = mine
    for name, got in speeds.items():
        if got:
            results[name].update(
                samples_per_s=statistics.median(got),
                samples_per_s_min=min(got),
                samples_per_s_max=max(got),
                repeats=len(got),
            )
    if comm.rank == 0:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
