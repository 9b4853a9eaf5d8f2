"""Rank worker (1 rank): the lapsgd/lppsgd wrapper's interface: bad input, step(), train() on one rank
with a schedule, repeated train() calls and state_dict round trips."""

from __future__ import annotations

import pytest
import torch

import algorithms
import pycomm
from tests.algorithms.lap_models import Scale, SmallCNN, linear_loss
from tests.algorithms.test_lap_workers import LR, ones_dataset


def wrap(model: torch.nn.Module, algorithm: str = "lapsgd", **options) -> algorithms.CommOptimizer:
    return algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR, momentum=0.5), algorithm=algorithm, comm=pycomm.world(), **options
    )


def bad_input() -> None:
    model = SmallCNN()
    with pytest.raises(TypeError, match="torch.optim.SGD"):
        algorithms.CommOptimizer(torch.optim.Adam(model.parameters()), algorithm="lapsgd")
    with pytest.raises(ValueError, match="at most 8 processes"):
        wrap(model, "lppsgd", num_processes=9)
    opt = wrap(model, num_processes=2)
    with pytest.raises(RuntimeError, match=r"opt.train\(model, loss_fn, dataset"):
        opt.step()
    with pytest.raises(ValueError, match="exactly one of steps"):
        opt.train(model, linear_loss, ones_dataset())
    with pytest.raises(ValueError, match="exactly one of steps"):
        opt.train(model, linear_loss, ones_dataset(), steps=1, epochs=1)
    with pytest.raises(ValueError, match="batch_size"):
        opt.train(model, linear_loss, ones_dataset(), steps=1, batch_size=0)
    with pytest.raises(ValueError, match="trainable parameters must be exactly those"):
        opt.train(Scale(), linear_loss, ones_dataset(), steps=1)
    with pytest.raises(ValueError, match="start_method"):
        opt.train(model, linear_loss, ones_dataset(), steps=1, start_method="thread")
    with pytest.raises(ValueError, match="scheduler_interval"):
        opt.train(model, linear_loss, ones_dataset(), steps=1, scheduler_interval="minute")


def single_rank_training() -> None:
    model = Scale()
    opt = wrap(model, "lapsgd", num_processes=2, averaging_freq=4)
    sched = torch.optim.lr_scheduler.StepLR(opt.optimizer, step_size=1, gamma=0.5)
    seen = []
    result = opt.train(
        model,
        linear_loss,
        ones_dataset(64),
        epochs=2,
        batch_size=8,
        scheduler=sched,
        on_progress=seen.append,
        progress_every=4,
    )
    # one rank: the shard is the whole 64 items, 8 minibatches per epoch
    assert result.steps == 16 and sum(result.per_worker) == 16 and result.rounds == 0, result
    # a worker's updates are stale by at most the other worker's updates in all: their sum is <= 16
    assert 0.0 <= result.mean_staleness <= 1.0, result
    stats = opt.comm_stats()  # apps log these: over all updates, and since the previous comm_stats()
    assert stats["mean_staleness"] == stats["step_metrics"]["staleness_mean"] == result.mean_staleness, stats
    assert opt.comm_stats()["step_metrics"]["staleness_mean"] is None  # no update since
    assert opt.node_steps == 16
    assert opt.optimizer.param_groups[0]["lr"] == LR / 4  # stepped at epochs 1 and 2
    assert seen and all(0 < s["step"] <= 16 for s in seen) and seen[-1]["loss"] < 0, seen
    w_after_first = model.w.detach().clone()
    assert torch.all(w_after_first < 0)

    state = opt.state_dict()
    assert state["algorithm_state"]["node_steps"] == 16
    momentum = state["algorithm_state"]["momentum"]
    assert len(momentum["buffers"]) == 2 and momentum["ready"].sum() >= 1

    # a second call continues the node counter; the schedule goes on from epoch 2
    result = opt.train(model, linear_loss, ones_dataset(64), steps=8, batch_size=8, scheduler=sched)
    assert result.steps == 8 and opt.node_steps == 24
    assert opt.optimizer.param_groups[0]["lr"] == LR / 8
    assert torch.all(model.w.detach() < w_after_first)

    # a fresh wrapper restored from the state continues from node minibatch 16 with the saved momentum
    fresh = wrap(Scale(), "lapsgd", num_processes=2, averaging_freq=4)
    fresh.load_state_dict(state)
    assert fresh.node_steps == 16
    for row, saved in zip(fresh.momentum.buffers, momentum["buffers"]):
        for b, s in zip(row, saved):
            assert torch.equal(b, s)
    with pytest.raises(ValueError, match="num_processes=3"):
        wrap(Scale(), "lapsgd", num_processes=3).load_state_dict(state)


def pids(opt: algorithms.CommOptimizer) -> list[int]:
    return [p.pid for p in opt._pool.procs]


def workers_persist_across_calls() -> None:
    """The workers start once and sleep between train() calls with the same model and data (an app's
    segments between evaluations); anything they were given that changes starts new ones."""
    model, data = Scale(), ones_dataset(64)
    opt = wrap(model, "lapsgd", num_processes=2)
    first = opt.train(model, linear_loss, data, steps=8, batch_size=8)
    started = pids(opt)
    assert first.startup_seconds > 0 and first.seconds >= first.startup_seconds
    second = opt.train(model, linear_loss, data, steps=8, batch_size=8)
    assert pids(opt) == started and second.startup_seconds == 0.0, (pids(opt), started, second)
    assert second.steps == 8 and sum(second.per_worker) == 8 and opt.node_steps == 16
    old = opt._pool
    third = opt.train(model, linear_loss, ones_dataset(64), steps=8, batch_size=8)  # another dataset
    assert opt._pool is not old and third.startup_seconds > 0 and opt.node_steps == 24
    assert all(p.exitcode == 0 for p in old.procs), [p.exitcode for p in old.procs]  # closed, not left behind
    state = opt.state_dict()
    opt.load_state_dict(state)  # momentum and counters replaced: the old workers hold stale ones
    old = opt._pool
    opt.train(model, linear_loss, ones_dataset(64), steps=4, batch_size=8)
    assert opt._pool is not old and opt.node_steps == 28
    live = opt._pool
    opt.close()
    assert opt._pool is None and all(p.exitcode == 0 for p in live.procs)


if __name__ == "__main__":
    pycomm.init()
    bad_input()
    single_rank_training()
    workers_persist_across_calls()
    print("lap api ok", flush=True)
