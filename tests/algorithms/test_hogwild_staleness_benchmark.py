"""benchmarks/hogwild_staleness.py's simulation is LAP's worker rule: one worker is torch.optim.SGD with
the same schedule and batches; without momentum, P workers at staleness s are SGD whose gradient of
minibatch k is taken on the model before the last s updates; with momentum each worker keeps its own."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from algorithms.schedules import CosineWithWarmup
from benchmarks import hogwild_staleness as hs
from tests.algorithms.mnist import TinyCNN, split

STEPS = 12


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def reference(lr: float, momentum: float, staleness: int, data) -> torch.Tensor:
    """torch.optim.SGD on the same batches, each gradient taken on the parameters `staleness` updates ago."""
    (xt, yt), _ = data
    torch.manual_seed(0)
    model, probe = TinyCNN(), TinyCNN()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    sched = CosineWithWarmup(
        opt, total_steps=hs.SCHEDULE_PASSES * (len(yt) // hs.BATCH), warmup_steps=hs.WARMUP, baseline_lr=lr / 10
    )
    history = [flat(model).clone()]
    grads = []
    for k, idx in enumerate(hs.batch_order(len(yt), STEPS, 0)):
        torch.nn.utils.vector_to_parameters(history[max(0, k - staleness)], probe.parameters())
        loss = F.cross_entropy(probe(xt[idx]), yt[idx])
        grads.append(torch.autograd.grad(loss, list(probe.parameters())))
        history.append(None)
        if k >= staleness:  # update k - staleness lands now
            for p, g in zip(model.parameters(), grads[k - staleness]):
                p.grad = g.clone()
            opt.step()
            sched.step()
            history[k - staleness + 1] = flat(model).clone()
    for j in range(max(0, STEPS - staleness), STEPS):  # the last computed, applied at the end
        for p, g in zip(model.parameters(), grads[j]):
            p.grad = g.clone()
        opt.step()
        sched.step()
    return flat(model)


def test_one_worker_is_sgd():
    data = split()
    torch.testing.assert_close(
        flat(hs.train(1, 0, 0.05, 0.9, STEPS, 0, data)), reference(0.05, 0.9, 0, data), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("workers, staleness", [(2, 1), (3, 2)])
def test_without_momentum_the_workers_are_sgd_on_stale_gradients(workers, staleness):
    data = split()
    torch.testing.assert_close(
        flat(hs.train(workers, staleness, 0.05, 0.0, STEPS, 0, data)),
        reference(0.05, 0.0, staleness, data),
        rtol=1e-5,
        atol=1e-6,
    )


def test_with_momentum_each_worker_keeps_its_own():
    data = split()
    assert not torch.allclose(
        flat(hs.train(2, 0, 0.05, 0.9, STEPS, 0, data)), flat(hs.train(1, 0, 0.05, 0.9, STEPS, 0, data))
    )


def test_a_worker_cannot_miss_its_own_update():
    with pytest.raises(ValueError, match=r"staleness must be in \[0, P=2\), got 2"):
        hs.train(2, 2, 0.05, 0.9, STEPS, 0, split())
