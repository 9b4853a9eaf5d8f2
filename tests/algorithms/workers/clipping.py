"""opt.clip_grad_norm_ on 4 real ranks against torch's clip_grad_norm_ on one process. argv: OUT_DIR.

Synchronous data parallelism (mbsgd, zero1/2/3, zero2 sharded over 2 and replicated over 2) clips the mean
gradient as DDP does: the reference is the unsplit model on the whole batch (each rank's rows a quarter of
it, a mean loss), clipped by torch and stepped by SGD; the returned norm and the parameters after two
steps must equal it, for the 2-, 1- and inf-norm. Local SGD (plsgd) clips each rank's own gradient, and so
do qsr, easgd, lsgd and diloco (their norms against torch's on a copy of the rank's model). pp2 x
dp2 with mbsgd (over dp_replicate), zero2 and zero3 (over dp_shard) and with a plain torch optimizer (the
Pipeline's own clip) clip the whole model's gradient summed over the stages. Under zero2/zero3 torch's
clip_grad_norm_(model.parameters()) raises an error naming opt.clip_grad_norm_ (the training goes on after
it); under mbsgd it works and returns the same norm. zero2 inside each replica with plsgd across the replicas
clips the replica's own gradient."""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import torch

import algorithms
import pycomm
from tests.algorithms.pipeline_problem import make_batch, make_model
from tests.algorithms.workers.around_step import QUIET
from tests.algorithms.workers.common import run_cases, world
from tests.algorithms.workers.composition import current, rows

LR, MAX_NORM, STEPS, M = 0.5, 0.02, 2, 2
NORMS = {"l2": 2.0, "l1": 1.0, "inf": math.inf}
FP32_ATOL = 5e-7  # ZeRO's fp32 masters of the float64 model
LOCAL = ("qsr", "easgd", "lsgd", "diloco")


def reference(
    norm_type: float, data_rows: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The unsplit model on `data_rows` of each step's batch: torch's clip norms per step, parameters after."""
    model = make_model("mlp", seed=1)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    norms = []
    for t in range(STEPS):
        x, y, loss_fn = make_batch("mlp", t)
        sgd.zero_grad()
        loss_fn(model(data_rows(x)), data_rows(y)).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM, norm_type)))
        sgd.step()
    return norms, {n: p.detach().clone() for n, p in model.named_parameters()}


def verdict(
    norms: list[float],
    want_norms: list[float],
    params: dict[str, torch.Tensor],
    want: dict[str, torch.Tensor],
    atol: float,
) -> dict[str, Any]:
    norm_ok = all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(norms, want_norms))
    bad = [n for n, v in params.items() if not torch.allclose(v.double(), want[n], rtol=1e-5, atol=atol)]
    clipped = all(n > 2 * MAX_NORM for n in want_norms)  # the bound bites: clipping changed the step
    return {"ok": norm_ok and not bad and clipped, "norms": norms, "want_norms": want_norms, "bad": bad[:4]}


def data_parallel(
    method: str, norm_type: float, mesh_shape: dict[str, int] | None = None
) -> Callable[[], dict[str, Any]]:
    """`method` over all 4 ranks (or the mesh), each rank on its quarter of the batch."""

    def run() -> dict[str, Any]:
        comm = world()
        mesh = pycomm.Mesh(comm, **(mesh_shape or {}))
        model = make_model("mlp", seed=1 + comm.rank)  # wrapping broadcasts rank 0's
        opt = algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR), algorithm=method, mesh=mesh, model=model
        )
        dp = mesh["dp"]
        norms = []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad()
            loss_fn(model(rows(x, dp.rank, dp.size)), rows(y, dp.rank, dp.size)).backward()
            norms.append(float(opt.clip_grad_norm_(MAX_NORM, norm_type)))
            opt.step()
        want_norms, want = reference(norm_type)
        return verdict(norms, want_norms, current(opt, model), want, FP32_ATOL if method.startswith("zero") else 1e-12)

    return run


def local(norm_type: float) -> Callable[[], dict[str, Any]]:
    """plsgd between rounds: each rank clips its own gradient (what torch's clip gives on its model)."""

    def run() -> dict[str, Any]:
        comm = world()
        model = make_model("mlp", seed=1)
        opt = algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR), algorithm="plsgd", comm=comm, model=model, averaging_freq=8
        )
        norms = []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad()
            loss_fn(model(rows(x, comm.rank, 4)), rows(y, comm.rank, 4)).backward()
            norms.append(float(opt.clip_grad_norm_(MAX_NORM, norm_type)))
            opt.step()
        want_norms, want = reference(norm_type, lambda t: rows(t, comm.rank, 4))
        return verdict(norms, want_norms, current(opt, model), want, 1e-12)

    return run


def local_norms(method: str) -> Callable[[], dict[str, Any]]:
    """Another local method (its own rule between rounds): each step's clip norm is torch's on a copy of
    the rank's model as the method left it, on the rank's rows."""

    def run() -> dict[str, Any]:
        comm = world()
        model = make_model("mlp", seed=1)
        opt = algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR), algorithm=method, comm=comm, model=model, **QUIET[method]
        )
        norms, want_norms = [], []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            twin = copy.deepcopy(model)
            loss_fn(twin(rows(x, comm.rank, 4)), rows(y, comm.rank, 4)).backward()
            want_norms.append(float(torch.nn.utils.clip_grad_norm_(twin.parameters(), MAX_NORM)))
            opt.zero_grad()
            loss = loss_fn(model(rows(x, comm.rank, 4)), rows(y, comm.rank, 4))
            loss.backward()
            norms.append(float(opt.clip_grad_norm_(MAX_NORM)))
            opt.step(loss=loss)
        return verdict(norms, want_norms, {}, {}, 0.0)

    return run


def across_replicas(norm_type: float) -> Callable[[], dict[str, Any]]:
    """zero2 inside dp_shard2, plsgd across dp_replicate2: each replica clips its own gradient (the mean over
    its two shard ranks' rows), as torch's clip on that replica's model."""

    def run() -> dict[str, Any]:
        comm = world()
        mesh = pycomm.Mesh(comm, dp_replicate=2, dp_shard=2)
        model = make_model("mlp", seed=1)
        opt = algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR), algorithm="zero2", mesh=mesh, model=model
        )
        opt = algorithms.CommOptimizer(opt, algorithm="plsgd", mesh=mesh, model=model, averaging_freq=8)
        replica, dp = mesh.coords["dp_replicate"], mesh["dp"]
        norms = []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad()
            loss_fn(model(rows(x, dp.rank, 4)), rows(y, dp.rank, 4)).backward()
            norms.append(float(opt.clip_grad_norm_(MAX_NORM, norm_type)))
            opt.step()
        want_norms, want = reference(norm_type, lambda t: rows(t, replica, 2))
        return verdict(norms, want_norms, current(opt, model), want, FP32_ATOL)

    return run


def pipelined(method: str | None, norm_type: float) -> Callable[[], dict[str, Any]]:
    """pp2 x dp2: `method` on the stages (None: a plain torch optimizer, the Pipeline averaging and clipping)."""

    def run() -> dict[str, Any]:
        comm = world()
        replicate = method in (None, "mbsgd")
        mesh = pycomm.Mesh(comm, pp=2, dp_replicate=2 if replicate else 1, dp_shard=1 if replicate else 2)
        replica = mesh["dp"].rank
        model = make_model("mlp", seed=1)
        pipe = algorithms.Pipeline(model, mesh=mesh, schedule="1f1b", microbatches=M, split=[4])
        sgd = torch.optim.SGD(pipe.stage_module.parameters(), lr=LR)
        opt = (
            sgd
            if method is None
            else algorithms.CommOptimizer(sgd, algorithm=method, mesh=mesh, model=pipe.stage_module)
        )
        norms = []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad()
            pipe.train_step(
                rows(x, replica, 2) if pipe.is_first else None,
                rows(y, replica, 2) if pipe.is_last else None,
                loss_fn if pipe.is_last else None,
            )
            clip = pipe.clip_grad_norm_ if method is None else opt.clip_grad_norm_
            norms.append(float(clip(MAX_NORM, norm_type)))
            opt.step()
        want_norms, want = reference(norm_type)
        return verdict(
            norms,
            want_norms,
            current(opt, pipe.stage_module),
            want,
            FP32_ATOL if method and method.startswith("zero") else 1e-12,
        )

    return run


def torch_clip(method: str) -> Callable[[], dict[str, Any]]:
    """torch.nn.utils.clip_grad_norm_(model.parameters(), ...) where the method moved the gradients: an error
    naming opt.clip_grad_norm_ (and training goes on: the next steps clip through the optimizer); where
    p.grad is the reduced gradient (mbsgd): torch's own clip, equal to the reference."""

    def run() -> dict[str, Any]:
        comm = world()
        model = make_model("mlp", seed=1)
        opt = algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR), algorithm=method, comm=comm, model=model
        )
        norms, errors = [], []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad(set_to_none=False)  # torch's zeroing must not trip on what the method left
            loss_fn(model(rows(x, comm.rank, 4)), rows(y, comm.rank, 4)).backward()
            try:
                norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
            except RuntimeError as e:
                errors.append(str(e))
                norms.append(float(opt.clip_grad_norm_(MAX_NORM)))
            opt.step()
        want_norms, want = reference(2.0)
        res = verdict(norms, want_norms, current(opt, model), want, FP32_ATOL if method.startswith("zero") else 1e-12)
        named = len(errors) == STEPS and all("opt.clip_grad_norm_" in e and method in e for e in errors)
        res.update(errors=[e[:300] for e in errors[:1]])
        res["ok"] &= named if method in ("zero2", "zero3") else not errors
        return res

    return run


def main() -> None:
    comm = world()
    cases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    for name, order in NORMS.items():
        for method in ("mbsgd", "zero2", "zero3"):
            cases.append((f"dp_{method}_{name}", data_parallel(method, order)))
        cases.append((f"local_plsgd_{name}", local(order)))
    cases += [
        ("dp_zero1_l2", data_parallel("zero1", 2.0)),
        ("dp_zero2_hybrid_l2", data_parallel("zero2", 2.0, {"dp_replicate": 2, "dp_shard": 2})),
        ("dp_zero2_hybrid_inf", data_parallel("zero2", math.inf, {"dp_replicate": 2, "dp_shard": 2})),
        ("across_zero2_plsgd_l2", across_replicas(2.0)),
    ]
    cases += [(f"local_{method}_l2", local_norms(method)) for method in LOCAL]
    for method in (None, "mbsgd", "zero2", "zero3"):
        for name in ("l2", "inf"):
            cases.append((f"pp_{method or 'torch'}_{name}", pipelined(method, NORMS[name])))
    for method in ("mbsgd", "zero1", "zero2", "zero3"):
        cases.append((f"torch_clip_{method}", torch_clip(method)))
    run_cases(comm, cases)


if __name__ == "__main__":
    main()
