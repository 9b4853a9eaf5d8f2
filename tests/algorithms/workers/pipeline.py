"""algorithms.Pipeline on real ranks against the unsplit model on one process. argv: OUT_DIR MODE [MODE]
(each MODE's cases in turn, in the same ranks: one launch serves both on 4 ranks).
MODE "stages": every rank a stage (p = ranks); both schedules, several micro-batch counts (also fewer
than the stages), both models, a user split, interleaved 1F1B: loss and every gradient over two SGD steps, the measured
bubble and peak live activations, and the input errors. MODE "dp": 2 stages x 2 replicas, gradients
averaged by the built-in buckets and by an mbsgd wrapper on the replica communicator."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch

import algorithms
import pycomm
from tests.algorithms.pipeline_problem import close, make_batch, make_model, reference_step
from tests.algorithms.workers.common import run_cases, world

STEPS, LR, TOL = 2, 0.1, 0.15  # TOL: bubble and peak live activations against the formulas


def shard(t: torch.Tensor, replica: int, replicas: int) -> torch.Tensor:
    return t.chunk(replicas)[replica]


def compare(
    kind: str,
    schedule: str,
    m: int,
    *,
    split: Optional[list[int]] = None,
    data_parallel: int = 1,
    wrap: Optional[str] = None,
    chunks: int = 2,
) -> Callable[[], dict[str, Any]]:
    """STEPS SGD steps of the pipeline (each replica on its part of the batch) and of the unsplit model on
    the whole batch: loss and every gradient of this stage's parameters equal to rtol 1e-5 each step."""

    def run() -> dict[str, Any]:
        comm = world()
        ref = make_model(kind, seed=1)
        shape = pycomm.mesh.resolve_shape(comm.size, pp=-1, dp_shard=data_parallel)  # Pipeline's data_parallel mesh
        replica = pycomm.mesh.coords_of(comm.rank, shape)["dp_shard"]
        # the replicas start from different weights: the pipeline broadcasts replica 0's
        model = make_model(kind, seed=1 + replica)
        pipe = algorithms.Pipeline(
            model,
            comm,
            schedule=schedule,
            microbatches=m,
            split=split,
            data_parallel=data_parallel,
            average_gradients=wrap is None,
            chunks=chunks,
        )
        opt: Any = torch.optim.SGD(pipe.stage_module.parameters(), lr=LR)
        if wrap is not None:
            opt = algorithms.CommOptimizer(opt, algorithm=wrap, comm=pipe.replica_comm, model=pipe.stage_module)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
        mine = dict(pipe.stage_module.named_parameters())
        bad: list[str] = []
        losses = []
        for step in range(STEPS):
            ref_loss, ref_grads = reference_step(ref, kind, step)
            x, y, loss_fn = make_batch(kind, step)
            opt.zero_grad()
            loss = pipe.train_step(
                shard(x, replica, data_parallel) if pipe.is_first else None,
                shard(y, replica, data_parallel) if pipe.is_last else None,
                loss_fn if pipe.is_last else None,
                no_sync=opt.no_sync if wrap == "mbsgd" else None,
            )
            losses.append((loss, ref_loss))
            if not close(torch.tensor(loss), torch.tensor(ref_loss)):
                bad.append(f"step {step} loss {loss} != {ref_loss}")
            bad += [f"step {step} grad {n}" for n, p in mine.items() if not close(p.grad, ref_grads[n])]
            opt.step()
            ref_opt.step()
        bad += [
            f"param {n} after {STEPS} steps"
            for n, p in mine.items()
            if not close(p.detach(), dict(ref.named_parameters())[n].detach())
        ]
        st = pipe.stats()
        return {
            "ok": not bad and len(mine) > 0,
            "bad": bad[:5],
            "losses": losses,
            "params": sorted(mine),
            **measured(st, schedule, pipe.stages, m, pipe.chunks),
        }

    return run


def measured(st: dict[str, Any], schedule: str, p: int, m: int, v: int = 1) -> dict[str, Any]:
    """Against the formulas: bubble (p-1)/(v m + p-1); peak live m (GPipe), min(p - s, m) (1F1B),
    min((p - s - 1) * 2 + (v - 1) * p + 1, v m) (interleaved, counted in chunk activations)."""
    want_peak = {
        "gpipe": [m] * p,
        "1f1b": [min(p - s, m) for s in range(p)],
        "interleaved_1f1b": [min((p - s - 1) * 2 + (v - 1) * p + 1, v * m) for s in range(p)],
    }[schedule]
    return {
        "bubble": st["bubble"],
        "expected_bubble": st["expected_bubble"],
        "peak_live": st["peak_live"],
        "expected_peak": want_peak,
        "wall_bubble": st["wall_bubble"],
        "bubble_ok": abs(st["bubble"] - st["expected_bubble"]) <= TOL * st["expected_bubble"] + 1e-12,
        "peak_ok": all(abs(a - b) <= TOL * b for a, b in zip(st["peak_live"], want_peak)),
    }


def schedule_shape(schedule: str, m: int) -> Callable[[], dict[str, Any]]:
    """Bubble and peak live activations of a step against (p-1)/(m+p-1) and p (1F1B) / m (GPipe)."""

    def run() -> dict[str, Any]:
        comm = world()
        pipe = algorithms.Pipeline(make_model("deep", 1), comm, schedule=schedule, microbatches=m)
        x, y, loss_fn = make_batch("deep", 0, rows=m * 2)
        pipe.train_step(x, y, loss_fn)
        res = measured(pipe.stats(), schedule, pipe.stages, m, pipe.chunks)
        return {"ok": res["bubble_ok"] and res["peak_ok"], **res}

    return run


def raises(exc: type, words: str, fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        fn()
    except exc as e:
        return {"ok": words in str(e), "message": str(e)}
    return {"ok": False, "message": "no exception"}


def errors() -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    def too_few_layers() -> dict[str, Any]:
        comm = world()
        return raises(
            ValueError,
            "fewer than the",
            lambda: algorithms.Pipeline(
                torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(comm.size - 1)]), comm
            ),
        )

    def indivisible_batch() -> dict[str, Any]:
        # only the first stage sees x: every rank must raise, none may wait for activations
        comm = world()
        pipe = algorithms.Pipeline(make_model("mlp", 1), comm, microbatches=4)
        x, y, loss_fn = make_batch("mlp", 0, rows=10)
        return raises(
            ValueError,
            "does not divide into microbatches=4" if pipe.is_first else "rejected its input",
            lambda: pipe.train_step(x, y[:8], loss_fn),
        )

    def bad_split() -> dict[str, Any]:
        comm = world()
        return raises(
            ValueError,
            "strictly increasing",
            lambda: algorithms.Pipeline(
                make_model("mlp", 1), comm, split=[3] * (comm.size - 1) if comm.size > 2 else [9]
            ),
        )

    def interleaved_bad_m() -> dict[str, Any]:
        comm = world()
        return raises(
            ValueError,
            f"microbatches a multiple of the {comm.size} stages",
            lambda: algorithms.Pipeline(
                make_model("deep", 1), comm, schedule="interleaved_1f1b", microbatches=comm.size + 1
            ),
        )

    def usable_after_error() -> dict[str, Any]:
        comm = world()
        pipe = algorithms.Pipeline(make_model("mlp", 1), comm, microbatches=2)
        x, y, loss_fn = make_batch("mlp", 0)
        try:
            pipe.train_step(x[:5], y, loss_fn)
        except ValueError:
            pass
        pipe.train_step(x, y, loss_fn)
        return {"ok": pipe.stats()["bubble"] > 0}

    return [
        ("too_few_layers", too_few_layers),
        ("indivisible_batch", indivisible_batch),
        ("bad_split", bad_split),
        ("usable_after_error", usable_after_error),
        ("interleaved_bad_m", interleaved_bad_m),
    ]


def main() -> None:
    comm = world()
    p = comm.size
    cases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if "stages" in sys.argv[2:]:
        for schedule in ("gpipe", "1f1b"):
            for m in sorted({1, p - 1, 2 * p}):
                for kind in ("mlp", "tokens"):
                    cases.append((f"{schedule}_m{m}_{kind}", compare(kind, schedule, m)))
            cases.append((f"{schedule}_split", compare("mlp", schedule, 3, split=[2 * s for s in range(1, p)])))
            cases.append((f"{schedule}_shape", schedule_shape(schedule, 4 * p)))
        # interleaved: 2 chunks per stage, the deep mlp cut into 2p chunks of at least one Linear each (balanced
        # by parameter count and by a split), m a multiple of p
        cases.append(("interleaved_balanced", compare("deep", "interleaved_1f1b", 2 * p)))
        cases.append(
            ("interleaved_split_m_p", compare("deep", "interleaved_1f1b", p, split=[2 * k for k in range(1, 2 * p)]))
        )
        cases.append(("interleaved_shape", schedule_shape("interleaved_1f1b", 4 * p)))
        cases += errors()
    if "dp" in sys.argv[2:]:
        for schedule in ("gpipe", "1f1b"):
            cases.append((f"dp_{schedule}", compare("mlp", schedule, 3, data_parallel=2)))
            cases.append((f"dp_{schedule}_tokens", compare("tokens", schedule, 2, data_parallel=2)))
        cases.append(("dp_interleaved", compare("deep", "interleaved_1f1b", 4, data_parallel=2)))
        cases.append(("dp_mbsgd_wrapper", compare("mlp", "1f1b", 3, data_parallel=2, wrap="mbsgd")))
    run_cases(comm, cases)


if __name__ == "__main__":
    main()
