"""ZeRO stages against mbsgd: parameters after 10 AdamW steps (fp32 to TOL, bf16 to TOL_BF16) on the
model with a parameter smaller than the world size. argv: OUT_DIR [hybrid=K]: hybrid=K runs, after the
cases, those that take hybrid= again as "hybrid_<case>" with hybrid=True and PYCOMM_RANKS_PER_NODE=K (nodes
of K ranks), in the same processes."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch

import algorithms
import pycomm
from tests.algorithms.problem import loss_on
from tests.algorithms.workers.common import max_diff, run_cases, world
from tests.algorithms.zero_problem import TinyScaled, make_inner, train

TOL = 1e-6
TOL_BF16 = 5e-3  # bf16 compute and parameters (fp32 masters) against fp32 mbsgd after 10 steps: measured 3e-4
TOL_INT8 = 5e-3  # int8 gradients and weights on the wire after 10 steps: measured 1.2e-3
STEPS = 10
STAGES = ("zero1", "zero2", "zero3")


_REFERENCES: dict[str, list[torch.Tensor]] = {}


def reference(comm: Any, inner: str) -> list[torch.Tensor]:
    """mbsgd's parameters after STEPS steps with `inner`: computed once per run, every case compares with them."""
    if inner not in _REFERENCES:
        model = TinyScaled(seed=1 + comm.rank)
        opt = algorithms.CommOptimizer(make_inner(inner, model.parameters()), algorithm="mbsgd", comm=comm, model=model)
        train(model, opt, comm.rank, STEPS)
        _REFERENCES[inner] = [p.detach().clone() for p in model.parameters()]
    return _REFERENCES[inner]


def sharded(comm: Any, algorithm: str, inner: str, **options: Any) -> tuple[torch.nn.Module, Any]:
    model = TinyScaled(seed=1 + comm.rank)
    opt = algorithms.CommOptimizer(
        make_inner(inner, model.parameters()), algorithm=algorithm, comm=comm, model=model, bucket_bytes=64, **options
    )  # several buckets
    train(model, opt, comm.rank, STEPS)
    return model, opt


def equal_to_mbsgd(comm: Any, algorithm: str, inner: str, hybrid: bool) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        ref = reference(comm, inner)
        model, opt = sharded(comm, algorithm, inner, hybrid=hybrid)
        full = list(opt.full_state_dict()["model"].values())
        # zero3's parameters are empty between steps: only its full state dict holds them
        mine = full if algorithm == "zero3" else [p.detach().clone() for p in model.parameters()]
        diff, full_diff = max_diff(mine, ref), max_diff(full, ref)
        moved = max_diff(ref, list(TinyScaled(seed=1).parameters()))
        shard_ranks = int(os.environ["PYCOMM_RANKS_PER_NODE"]) if hybrid else comm.size
        return {
            "ok": diff <= TOL and full_diff <= TOL and moved > 0 and opt.shard_comm.size == shard_ranks,
            "max_diff": diff,
            "full_diff": full_diff,
            "moved": moved,
            "shard_ranks": opt.shard_comm.size,
        }

    return run


def zero3_units(comm: Any) -> dict[str, Any]:
    """zero3 with units=[the two Linear layers] (the root's `scale` a unit of its own): equal to mbsgd,
    and the parameters are empty tensors between steps (sharded, not merely copied)."""
    ref = reference(comm, "adamw")
    model = TinyScaled(seed=1 + comm.rank)
    opt = algorithms.CommOptimizer(
        make_inner("adamw", model.parameters()),
        algorithm="zero3",
        comm=comm,
        model=model,
        units=[model.body[0], model.body[2]],
    )
    train(model, opt, comm.rank, STEPS)
    diff = max_diff(list(opt.full_state_dict()["model"].values()), ref)
    empty = all(p.numel() == 0 for p in model.parameters())
    return {
        "ok": diff <= TOL and empty and len(opt.units) == 3,
        "max_diff": diff,
        "params_empty": empty,
        "units": len(opt.units),
    }


class RootPenalty(TinyScaled):
    """TinyScaled plus a root parameter used only outside the model's forward, in the loss (as CLIP's
    logit_scale, or an L2 penalty on a learned scale)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.tiny = torch.nn.Parameter(torch.tensor([0.5, -1.0]))


def penalized_loss(model: RootPenalty, rank: int, step: int) -> torch.Tensor:
    return loss_on(model, rank, step) + (model.tiny**2).sum()


def zero3_root_outside_forward(comm: Any) -> dict[str, Any]:
    """zero3 where a root parameter is used outside forward (backward must not fail with "attempting to
    assign a gradient of size [2] to a tensor of size [0]") equals torch's AdamW stepping the ranks' averaged
    gradients (comm.allreduce AVG, no algorithm involved)."""
    ref = RootPenalty(seed=1)  # zero3 starts every rank from rank 0's parameters (seed 1)
    ref_opt = make_inner("adamw", ref.parameters())
    for t in range(STEPS):
        ref_opt.zero_grad()
        penalized_loss(ref, comm.rank, t).backward()
        for p in ref.parameters():
            comm.allreduce(p.grad, op=pycomm.AVG)
        ref_opt.step()
    model = RootPenalty(seed=1 + comm.rank)
    opt = algorithms.CommOptimizer(make_inner("adamw", model.parameters()), algorithm="zero3", comm=comm, model=model)
    for t in range(STEPS):
        opt.zero_grad()
        penalized_loss(model, comm.rank, t).backward()
        opt.step()
    full, want = opt.full_state_dict()["model"], ref.state_dict()
    diff = max_diff([full[k] for k in sorted(want)], [want[k] for k in sorted(want)])
    moved = float((want["tiny"] - torch.tensor([0.5, -1.0])).abs().max())
    return {"ok": diff <= TOL and moved > 0, "max_diff": diff, "tiny_moved": moved}


def tiny_gpt_run(comm: Any, algorithm: str) -> tuple[Any, list[torch.Tensor]]:
    from apps.models.gpt import GPT

    torch.manual_seed(0)
    model = GPT(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    # lr 1e-3: Adam turns the last-bit differences of a 4-rank all-reduce against a reduce-scatter
    # (another summation order) into lr-sized ones where a gradient is near zero (2e-6 at lr 1e-2)
    opt = algorithms.CommOptimizer(
        torch.optim.AdamW(model.parameters(), lr=1e-3), algorithm=algorithm, comm=comm, model=model
    )
    for t in range(5):
        g = torch.Generator().manual_seed(1000 * comm.rank + t)
        idx = torch.randint(0, 11, (4, 8), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(idx).reshape(-1, 11), idx.roll(1, 1).reshape(-1)).backward()
        opt.step()
    state = opt.full_state_dict()["model"] if algorithm == "zero3" else model.state_dict()
    return opt, [state[k] for k in sorted(state)]


def zero3_gpt(comm: Any) -> dict[str, Any]:
    """zero3 on the GPT (tied embedding and head, blocks in an nn.Sequential) equals mbsgd."""
    _, ref = tiny_gpt_run(comm, "mbsgd")
    opt, mine = tiny_gpt_run(comm, "zero3")
    diff = max_diff(mine, ref)
    # pos, blocks[0], blocks[1], norm, and the root holding the tied tok/head weight
    return {"ok": diff <= TOL and len(opt.units) == 5, "max_diff": diff, "units": len(opt.units)}


def accumulated(comm: Any, algorithm: str) -> list[torch.Tensor]:
    """3 steps, each of two half batches (the first backward inside no_sync())."""
    from tests.algorithms.problem import batch

    model = TinyScaled(seed=1 + comm.rank)
    opt = algorithms.CommOptimizer(make_inner("adamw", model.parameters()), algorithm=algorithm, comm=comm, model=model)
    for t in range(3):
        x, y = batch(comm.rank, t)
        opt.zero_grad()
        with opt.no_sync():
            (torch.nn.functional.cross_entropy(model(x[:4]), y[:4]) / 2).backward()
        (torch.nn.functional.cross_entropy(model(x[4:]), y[4:]) / 2).backward()
        opt.step()
    state = opt.full_state_dict()["model"] if algorithm != "mbsgd" else model.state_dict()
    return [state[k] for k in sorted(state)]


def accumulation(comm: Any, algorithm: str) -> dict[str, Any]:
    """Gradient accumulation with no_sync() equals mbsgd's."""
    diff = max_diff(accumulated(comm, algorithm), accumulated(comm, "mbsgd"))
    return {"ok": diff <= TOL, "max_diff": diff}


def int8_near_mbsgd(comm: Any, algorithm: str) -> dict[str, Any]:
    """codec="int8": quantized gradient reduce-scatter and weight all-gather (ZeRO++), near mbsgd."""
    ref = reference(comm, "adamw")
    _, opt = sharded(comm, algorithm, "adamw", codec="int8")
    diff = max_diff(list(opt.full_state_dict()["model"].values()), ref)
    return {"ok": TOL < diff <= TOL_INT8, "max_diff": diff}  # above TOL: the codec was used


def bf16_near_mbsgd(comm: Any, algorithm: str, hybrid: bool) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        ref = reference(comm, "adamw")
        model, opt = sharded(comm, algorithm, "adamw", hybrid=hybrid, param_dtype=torch.bfloat16)
        masters = list(opt.full_state_dict()["model"].values())
        diff = max_diff(masters, ref)
        dtypes = {str(p.dtype) for p in model.parameters()}  # what forward computes in
        masters_fp32 = all(m.dtype == torch.float32 for m in masters)
        return {
            "ok": diff <= TOL_BF16 and dtypes == {"torch.bfloat16"} and masters_fp32,
            "max_diff": diff,
            "dtypes": sorted(dtypes),
        }

    return run


def with_nodes_of(per_node: int, run: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """`run` with PYCOMM_RANKS_PER_NODE=per_node (read when a hybrid mesh is made), unset again after."""

    def in_nodes() -> dict[str, Any]:
        os.environ["PYCOMM_RANKS_PER_NODE"] = str(per_node)
        try:
            return run()
        finally:
            del os.environ["PYCOMM_RANKS_PER_NODE"]

    return in_nodes


def hybrid_cases(comm: Any, hybrid: bool) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """The cases that take hybrid= (the others run the same code with or without nodes declared)."""
    cases = []
    for algorithm in STAGES:
        cases.append((f"{algorithm}_adamw", equal_to_mbsgd(comm, algorithm, "adamw", hybrid)))
        cases.append((f"{algorithm}_sgd", equal_to_mbsgd(comm, algorithm, "sgd", hybrid)))
        cases.append((f"{algorithm}_bf16", bf16_near_mbsgd(comm, algorithm, hybrid)))
    return cases


def main() -> None:
    comm = world()
    per_node = [int(a.removeprefix("hybrid=")) for a in sys.argv[2:] if a.startswith("hybrid=")]
    cases = hybrid_cases(comm, False)
    cases.append(("zero3_units", lambda: zero3_units(comm)))
    cases.append(("zero3_gpt", lambda: zero3_gpt(comm)))
    cases.append(("zero3_root_outside_forward", lambda: zero3_root_outside_forward(comm)))
    cases += [(f"{a}_no_sync", lambda a=a: accumulation(comm, a)) for a in STAGES]
    cases += [(f"{a}_int8", lambda a=a: int8_near_mbsgd(comm, a)) for a in ("zero2", "zero3")]
    for k in per_node:  # after the others: their meshes are made without nodes declared
        cases += [(f"hybrid_{name}", with_nodes_of(k, run)) for name, run in hybrid_cases(comm, True)]
    run_cases(comm, cases)


if __name__ == "__main__":
    main()
