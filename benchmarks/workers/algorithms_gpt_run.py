"""One rank of benchmarks/algorithms_gpt.py: train the char GPT (10.7M parameters: nanoGPT's
shakespeare_char model at context 64, dropout off) on tiny Shakespeare with ONE case (torch DDP over gloo,
or a pycomm algorithm, optionally with a codec), then score the eval loss on held-out text.

Every case sees the same samples in the same order (one seeded shuffle of the training windows, dealt
rank-strided) from the same initial model, with AdamW and the same cosine schedule: only the way ranks
communicate differs. Only training steps are timed, the first WARMUP of them excluded (DDP builds its
buckets, allocators warm up); samples/s is the slowest rank's. Before the evaluation plsgd/qsr average
the ranks' models (average_now), so every rank scores the same model on its quarter of the eval windows.
Usage: algorithms_gpt_run OUT_JSON CASE STEPS BATCH DATA_TXT [OPTIONS_JSON [SETTINGS_JSON]] (OPTIONS_JSON: a
sweep's overrides of the case's algorithm options, "codec_block": N sends through Int8Codec(block=N);
SETTINGS_JSON: {"seed": S, "model": {...}}, the seed of the initial model and data order (default 0) and
overrides of MODEL, for benchmarks/diloco.py). `bytes_sent` is what the optimizer sent while training
(comm_stats after the last step minus after wrapping: the initial broadcast, the same for every case, and
the averaging before the evaluation are left out)."""

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
from apps.data.text import load
from apps.models.gpt import GPT
from benchmarks.mnist_cnn import shard_batches
from benchmarks.workers.rank0_result import write_result_and_close

BLOCK, SEED, WARMUP, EVAL_WINDOWS = 64, 0, 2, 256
ADAMW = {"lr": 2e-3, "betas": (0.9, 0.99), "weight_decay": 0.1}
GRAD_CLIP = 1.0
MODEL = {"n_layer": 6, "n_head": 6, "n_embd": 384, "dropout": 0.0}

# case -> (algorithm, options); "+int8" appended to a name adds codec="int8"
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mbsgd": ("mbsgd", {}),
    # chosen by a sweep at 120 steps (docs/gpt_local_sgd_settings.md): H = 6 is the largest
    # constant period within 1% of DDP's eval loss (H = 4: +0.07%, 6: +0.77%, 8 after 30 steps at H = 1: +4.4%)
    "plsgd": ("plsgd", {"averaging_freq": 6}),
    # QSR (Gu et al.): H = max(h_min, floor((alpha / lr)^2)); alpha = 2.5 lr_peak starts at H = 6 and grows
    # as the cosine decays; exp_avg averaged with the parameters (exp_avg_sq too would triple a round's
    # bytes: -0.3% loss at alpha = 2 lr_peak, but no faster than plsgd)
    "qsr": ("qsr", {"h_base": 4, "alpha": 2.5 * ADAMW["lr"], "avg_m": True}),
    # DiLoCo (benchmarks/diloco.py): outer Nesterov SGD lr 0.7, momentum 0.9 (the papers'); streaming with the
    # Streaming DiLoCo paper's overlap (one inner step) and mixing 0.5
    "diloco-h16": ("diloco", {"inner_steps": 16}),
    "diloco-h64": ("diloco", {"inner_steps": 64}),
    "streaming-f4": ("diloco", {"inner_steps": 64, "fragments": 4, "sync_delay": 1, "mixing": 0.5}),
}


def case_options(name: str, total_steps: int, overrides: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(algorithm, options) of a case; `overrides` (a sweep's) replace options, "codec_block" the int8 block."""
    base, _, codec = name.partition("+")
    algorithm, options = CASES[base]
    options = dict(options, **({"codec": codec} if codec else {}))
    if algorithm == "qsr":  # its H rule must know the schedule: h_base during warm-up, then (alpha / lr)^2
        options.update(total_steps=total_steps, warmup_steps=warmup_steps(total_steps))
    options.update(overrides or {})
    if "codec_block" in options:
        options["codec"] = pycomm.Int8Codec(block=options.pop("codec_block"))
    return algorithm, options


def warmup_steps(total_steps: int) -> int:
    return max(1, total_steps // 10)


def make_optimizer(
    name: str, model: torch.nn.Module, comm: Any, total_steps: int, overrides: dict[str, Any] | None = None
) -> tuple[torch.nn.Module, Any]:
    """(the module to call, the optimizer to step) of one case."""
    if name == "ddp":
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}", rank=comm.rank, world_size=comm.size
        )
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        return ddp, torch.optim.AdamW(ddp.parameters(), **ADAMW)
    algorithm, options = case_options(name, total_steps, overrides)
    inner = torch.optim.AdamW(model.parameters(), **ADAMW)
    return model, algorithms.CommOptimizer(inner, algorithm=algorithm, comm=comm, model=model, **options)


def mean_over_ranks(comm: Any, value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    comm.allreduce(t, op=pycomm.AVG)
    return float(t)


@torch.no_grad()
def eval_loss(comm: Any, model: torch.nn.Module, windows: Any) -> float:
    """Mean loss over the first EVAL_WINDOWS held-out windows (this rank scores its strided share)."""
    model.eval()
    idx = torch.arange(comm.rank, min(EVAL_WINDOWS, len(windows)), comm.size)
    losses = []
    for chunk in idx.split(32):
        x, y = windows.batch(chunk)
        losses.append(F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum") / y.numel())
    model.train()
    return mean_over_ranks(comm, float(torch.stack(losses).sum()) / len(losses))


def main() -> None:
    begun = time.perf_counter()
    out, name, steps, batch, data = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    overrides = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None
    settings = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
    seed = settings.get("seed", SEED)
    torch.set_num_threads(1)
    comm = pycomm.init()
    splits = load(data, block_size=BLOCK)
    train, held = splits.train, splits.eval
    torch.manual_seed(seed)
    model = GPT(splits.info["vocab_size"], block_size=BLOCK, **{**MODEL, **settings.get("model", {})})
    module, opt = make_optimizer(name, model, comm, steps, overrides)
    sent_at_wrap = 0 if name == "ddp" else opt.comm_stats()["bytes"]
    sched = algorithms.CosineWithWarmup(
        opt, total_steps=steps, warmup_steps=warmup_steps(steps), baseline_lr=ADAMW["lr"] / 10, min_lr=ADAMW["lr"] / 10
    )
    order: list[torch.Tensor] = []
    epoch = 0
    while len(order) < steps:
        order += shard_batches(len(train), comm.rank, comm.size, batch, epoch, seed=seed + 1)
        epoch += 1
    seconds, losses = 0.0, []
    setup = time.perf_counter() - begun
    for step, idx in enumerate(order[:steps]):
        t0 = time.perf_counter()
        x, y = train.batch(idx)
        opt.zero_grad()
        loss = F.cross_entropy(module(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), GRAD_CLIP)
        opt.step() if name == "ddp" else opt.step(loss=loss)
        sched.step()
        if step >= WARMUP:
            seconds += time.perf_counter() - t0
        losses.append(float(loss))
    sent_training = 0 if name == "ddp" else opt.comm_stats()["bytes"] - sent_at_wrap
    if hasattr(opt, "average_now"):
        opt.average_now()
    t_eval = time.perf_counter()
    final = eval_loss(comm, model, held)
    t_eval = time.perf_counter() - t_eval
    slowest = torch.tensor([seconds], dtype=torch.float64)
    comm.allreduce(slowest, op=pycomm.MAX)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    sent = grad_bytes * steps if name == "ddp" else opt.comm_stats()["bytes"]
    result = {
        "samples_per_s": (steps - WARMUP) * batch * comm.size / float(slowest),
        "eval_loss": final,
        "train_loss_last10": sum(losses[-10:]) / len(losses[-10:]),
        "bytes_per_step": sent / steps,
        "bytes_sent": grad_bytes * steps if name == "ddp" else sent_training,
        "seed": seed,
        "steps": steps,
        "batch_per_rank": batch,
        "train_seconds": float(slowest),
        "parameters": sum(p.numel() for p in model.parameters()),
        "comm_seconds": None if name == "ddp" else opt.comm_stats()["seconds"],
        "setup_seconds": setup,
        "eval_seconds": t_eval,
    }  # rank 0's: where a launch's time goes
    if comm.rank == 0:
        print(f"{name}: {result['samples_per_s']:.2f} samples/s, eval loss {final:.4f}", flush=True)
    del module, opt  # DDP's, before the group is destroyed (rank0_result)
    write_result_and_close(comm, out, result)


if __name__ == "__main__":
    main()
