"""When LAP-SGD averages (the agreed counters) and how its learning rate follows the node counter."""
import pytest
import torch

from algorithms.lap.averaging import AveragingPolicy
from algorithms.lap.loop import LrSync


def test_averaging_is_due_when_the_fastest_rank_is_freq_ahead_of_the_oldest_round():
    policy = AveragingPolicy(averaging_freq=8, pre_post_steps=20)
    # before pre_post_steps (judged by the agreed max count) every minibatch triggers a round
    assert policy.freq_at(0) == 1 and policy.freq_at(19) == 1 and policy.freq_at(20) == 8
    assert policy.due(max_done=5, min_last=4) and not policy.due(max_done=4, min_last=4)
    # after it: max over ranks of minibatches - min over ranks of last_averaged_at >= 8
    assert not policy.due(max_done=27, min_last=20)
    assert policy.due(max_done=28, min_last=20)
    assert policy.due(max_done=40, min_last=12)     # a slow rank's old round makes it due at once


def test_lr_follows_the_rank_epoch_through_a_torch_scheduler():
    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)
    sync = LrSync(sgd, sched, "epoch", steps_per_epoch=10, node_steps=0)
    assert sync.lrs(9) == [1.0]
    assert sync.lrs(10) == [0.5]          # epoch = node minibatch counter / len(loader)
    assert sync.lrs(35) == [0.125]        # epochs 2 and 3 both passed since the last look
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
