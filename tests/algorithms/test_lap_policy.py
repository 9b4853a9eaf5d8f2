"""When LAP-SGD averages (the agreed counters) and how its learning rate follows the node counter."""

import math

import pytest
import torch

import algorithms
from algorithms.lap.averaging_activity import AveragingPolicy
from algorithms.lap.loop import LrSync


def test_averaging_is_due_when_the_fastest_rank_is_freq_ahead_of_the_oldest_round():
    policy = AveragingPolicy(averaging_freq=8, pre_post_steps=20)
    # before pre_post_steps (judged by the agreed max count) every minibatch triggers a round
    assert policy.freq_at(0) == 1 and policy.freq_at(19) == 1 and policy.freq_at(20) == 8
    assert policy.due(max_done=5, min_last=4) and not policy.due(max_done=4, min_last=4)
    # after it: max over ranks of minibatches - min over ranks of last_averaged_at >= 8
    assert not policy.due(max_done=27, min_last=20)
    assert policy.due(max_done=28, min_last=20)
    assert policy.due(max_done=40, min_last=12)  # a slow rank's old round makes it due at once


def _sgd(lr: float = 1.0) -> torch.optim.SGD:
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


# (scheduler on an SGD optimizer with lr 0.4, the same schedule written independently as a function of
# the fractional epoch e): the published code's rule is lr(minibatch k) = schedule(k / len(loader))
FRACTIONAL_CASES = {
    "multistep": (
        lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[1.5, 3], gamma=0.1),
        lambda e: 0.4 * (0.1 if 1.5 <= e < 3 else 0.01 if e >= 3 else 1.0),
    ),
    "cosine": (
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
        lambda e: 0.4 * 0.5 * (1 + math.cos(math.pi * e / 4)),
    ),
    "warmup-lambda": (
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: min(1.0, (e + 0.25) / 1.25)),
        lambda e: 0.4 * min(1.0, (e + 0.25) / 1.25),
    ),
    "pycomm-cosine": (
        lambda o: algorithms.CosineWithWarmup(o, total_steps=4, warmup_steps=1, baseline_lr=0.04),
        lambda e: 0.04 + 0.36 * e if e < 1 else 0.2 * (1 + math.cos(math.pi * min(e - 1, 3) / 3)),
    ),
}


@pytest.mark.parametrize("name", list(FRACTIONAL_CASES))
def test_lr_of_every_minibatch_is_the_schedule_at_the_fractional_epoch(name):
    make, reference = FRACTIONAL_CASES[name]
    sgd = _sgd(0.4)
    sync = LrSync(sgd, make(sgd), "fractional_epoch", steps_per_epoch=7, node_steps=0)
    for k in range(35):  # every node minibatch of 5 epochs of 7
        assert sync.lrs(k)[0] == pytest.approx(reference(k / 7), rel=1e-12, abs=1e-15), k


def test_fractional_epoch_is_the_default_and_resumes_anywhere():
    import inspect

    assert inspect.signature(algorithms.LAPSGD.train).parameters["scheduler_interval"].default == "fractional_epoch"
    make, reference = FRACTIONAL_CASES["cosine"]
    sgd = _sgd(0.4)
    sync = LrSync(sgd, make(sgd), "fractional_epoch", steps_per_epoch=7, node_steps=23)  # a later train() call
    assert sgd.param_groups[0]["lr"] == pytest.approx(reference(23 / 7))
    assert sync.lrs(30)[0] == pytest.approx(reference(30 / 7))
    assert sync.lrs(24)[0] == pytest.approx(reference(24 / 7))  # any counter, in any order: no state


def test_fractional_epoch_refuses_schedulers_without_an_epoch():
    sgd = _sgd()
    chained = torch.optim.lr_scheduler.SequentialLR(
        sgd, [torch.optim.lr_scheduler.ConstantLR(sgd), torch.optim.lr_scheduler.ConstantLR(sgd)], milestones=[2]
    )
    with pytest.raises(TypeError, match="takes no epoch"):
        LrSync(sgd, chained, "fractional_epoch", 10, 0)
    with pytest.raises(TypeError, match="takes no epoch"):
        LrSync(sgd, torch.optim.lr_scheduler.ReduceLROnPlateau(sgd), "fractional_epoch", 10, 0)


def test_lr_follows_the_rank_epoch_through_a_torch_scheduler():
    """scheduler_interval="epoch" (the old default) moves the schedule at whole epochs only."""
    sgd = _sgd()
    sched = torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)
    sync = LrSync(sgd, sched, "epoch", steps_per_epoch=10, node_steps=0)
    assert sync.lrs(9) == [1.0]
    assert sync.lrs(10) == [0.5]  # epoch = node minibatch counter / len(loader)
    assert sync.lrs(35) == [0.125]  # epochs 2 and 3 both passed since the last look
    assert sync.lrs(35) == [0.125]


def test_lr_per_step_scheduler_and_bad_arguments():
    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(sgd, lambda step: 1.0 / (1 + step))
    sync = LrSync(sgd, sched, "step", steps_per_epoch=10, node_steps=0)
    assert sync.lrs(3) == [0.25]
    with pytest.raises(ValueError, match="scheduler_interval"):
        LrSync(sgd, sched, "minute", 10, 0)
    with pytest.raises(TypeError, match="scheduler"):
        LrSync(sgd, object(), "epoch", 10, 0)


def test_step_interval_with_a_closed_form_schedule_is_per_minibatch():
    """apps pass "step" with schedules written in steps: lr(minibatch k) = schedule(k), for any k."""
    sgd = _sgd(0.4)
    sync = LrSync(sgd, algorithms.MultiStep(sgd, milestones=[10, 20], gamma=0.5), "step", 7, node_steps=0)
    assert sync.per_minibatch
    for k in (25, 3, 10, 9, 19, 20, 0):
        assert sync.lrs(k) == [0.4 * 0.5 ** ((k >= 10) + (k >= 20))], k
    chained = torch.optim.lr_scheduler.MultiplicativeLR(_sgd(), lambda s: 0.5)  # no closed form: in order
    assert not LrSync(chained.optimizer, chained, "step", 7, 0).per_minibatch
