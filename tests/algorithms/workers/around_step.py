"""What a user's loop does around our step, on real ranks, for every algorithm that hooks into the
user's loop: gradient clipping after backward, GradScaler's unscale_/step, an LR scheduler, isinstance.

Every configuration communicates no parameters in the first steps (periods of 8), so the update of a
step is exactly lr * (the gradients the user's code left): for mbsgd the averaged gradients, for the
others the local ones. Usage: around_step OUT_DIR [ALGORITHM ...]"""

from __future__ import annotations

import sys
from typing import Any

import torch

import algorithms
import pycomm
from tests.algorithms.problem import loss_on, make_model
from tests.algorithms.workers.common import max_diff, run_cases, world

LR, MAX_NORM = 1.0, 1e-3
QUIET = {
    "mbsgd": {},
    "plsgd": {"averaging_freq": 8},
    "qsr": {"h_base": 8, "h_min": 8, "warmup_steps": 100},
    "easgd": {"comm_period": 8},
    "easgd+": {"comm_period": 8},
    "lsgd": {"comm_period": 8},
    "lsgd+": {"comm_period": 8},
    "zero1": {},
    "diloco": {"inner_steps": 8},
}
AVERAGED = {"mbsgd", "zero1"}  # p.grad is the mean over ranks when backward returns
# p.grad is not kept (sharded): the user clips through opt.clip_grad_norm_ and GradScaler cannot see the
# gradients; tests/algorithms/test_zero.py covers their loop (clipping, LR schedule)
SHARDED_GRADS = {"zero2", "zero3"}
LOOP_OWNERS = {"lapsgd", "lppsgd"}  # train in their own worker processes: tests/algorithms/test_lapsgd.py
# independent processes over ZeroMQ (servers and workers, or stale peers): tests/algorithms/test_ps_*.py
INDEPENDENT = {"asyncps", "syncps", "ssp"}


def build(comm: Any, algorithm: str) -> tuple[torch.nn.Module, Any]:
    model = make_model(seed=1 + comm.rank)
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), algorithm=algorithm, comm=comm, model=model, **QUIET[algorithm]
    )
    return model, opt


def expected_grads(comm: Any, algorithm: str, loss: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """What p.grad must hold when backward returns: this rank's gradient, averaged over ranks for mbsgd and zero1."""
    local = [g.detach().clone() for g in torch.autograd.grad(loss, params, retain_graph=True)]
    if algorithm in AVERAGED:
        for g in local:
            comm.allreduce(g, op=pycomm.AVG)
    return local


def clipping(comm: Any, algorithm: str) -> dict[str, Any]:
    model, opt = build(comm, algorithm)
    params = list(model.parameters())
    loss = loss_on(model, comm.rank, 0)
    want = expected_grads(comm, algorithm, loss, params)
    loss.backward()
    after_backward = max_diff([p.grad for p in params], want)
    norm = float(torch.nn.utils.clip_grad_norm_(params, MAX_NORM))
    clipped = [p.grad.detach().clone() for p in params]
    before = [p.detach().clone() for p in params]
    opt.step(loss=loss)
    update = [b - p.detach() for b, p in zip(before, params)]
    applied = max_diff(update, [LR * c for c in clipped])
    update_norm = float(torch.linalg.vector_norm(torch.cat([u.reshape(-1) for u in update])))
    return {
        "ok": after_backward < 1e-6
        and applied < 1e-7
        and update_norm <= LR * MAX_NORM * 1.001
        and norm > 10 * MAX_NORM,
        "grads_after_backward_vs_expected": after_backward,
        "update_vs_lr_times_clipped": applied,
        "update_norm": update_norm,
        "norm_before_clip": norm,
    }


def scaler_and_scheduler(comm: Any, algorithm: str) -> dict[str, Any]:
    """GradScaler (scale, unscale_, step, update) and StepLR on the wrapper, two steps."""
    model, opt = build(comm, algorithm)
    params = list(model.parameters())
    is_optimizer = isinstance(opt, torch.optim.Optimizer)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    applied = []
    for step in range(2):
        lr = opt.param_groups[0]["lr"]
        opt.zero_grad()
        loss = loss_on(model, comm.rank, step)
        want = expected_grads(comm, algorithm, loss, params)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        before = [p.detach().clone() for p in params]
        scaler.step(opt, loss=loss)
        scaler.update()
        sched.step()
        applied.append(max_diff([b - p.detach() for b, p in zip(before, params)], [lr * g for g in want]))
    lr_now, inner_lr = opt.param_groups[0]["lr"], opt.optimizer.param_groups[0]["lr"]
    return {
        "ok": is_optimizer and max(applied) < 1e-6 and lr_now == inner_lr == LR * 0.25,
        "isinstance_optimizer": is_optimizer,
        "update_vs_lr_times_unscaled": applied,
        "lr": lr_now,
        "inner_lr": inner_lr,
    }


def main() -> None:
    comm = world()
    names = sys.argv[2:] or [n for n in algorithms.available() if n not in LOOP_OWNERS | SHARDED_GRADS | INDEPENDENT]
    cases = []
    for name in names:
        cases.append((f"clip-{name}", lambda name=name: clipping(comm, name)))
        cases.append((f"scaler-{name}", lambda name=name: scaler_and_scheduler(comm, name)))
    run_cases(comm, cases)


if __name__ == "__main__":
    main()
