"""benchmarks/hogwild_staleness.py's simulation is LAP's worker rule: one worker is torch.optim.SGD with
the same schedule and batches; without momentum, two workers are one; staleness s computes minibatch k's
gradient on the model before the last s updates."""
from __future__ import annotations

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
    sched = CosineWithWarmup(opt, total_steps=hs.SCHEDULE_PASSES * (len(yt) // hs.BATCH), warmup_steps=hs.WARMUP,
                             baseline_lr=lr / 10)
    history = [flat(model).clone()]
    grads = []
    for k, idx in enumerate(hs.batch_order(len(yt), STEPS, 0)):
        torch.nn.utils.vector_to_parameters(history[max(0, k - staleness)], probe.parameters())
        loss = F.cross_entropy(probe(xt[idx]), yt[idx])
        grads.append(torch.autograd.grad(loss, list(probe.parameters())))
        history.append(None)
        if k >= staleness:   # update k - staleness lands now
            for p, g in zip(model.parameters(), grads[k - staleness]):
                p.grad = g.clone()
            opt.step()
            sched.step()
            history[k - staleness + 1] = flat(model).clone()
    for j in range(max(0, STEPS - staleness), STEPS):   # the last computed, applied at the end
        for p, g in zip(model.parameters(), grads[j]):
            p.grad = g.clone()
        opt.step()
        sched.step()
    return flat(model)


def test_one_worker_is_sgd_and_staleness_delays_the_gradient():
    data = split()
    for staleness in (0, 2):
        got = flat(hs.train(1, staleness, 0.05, 0.9, STEPS, 0, data))
        torch.testing.assert_close(got, reference(0.05, 0.9, staleness, data), rtol=1e-5, atol=1e-6)


def test_without_momentum_two_workers_are_one():
    data = split()
    torch.testing.assert_close(flat(hs.train(2, 1, 0.05, 0.0, STEPS, 0, data)),
                               flat(hs.train(1, 1, 0.05, 0.0, STEPS, 0, data)), rtol=1e-6, atol=1e-7)
    # with momentum each worker's own buffer makes them differ
    assert not torch.allclose(flat(hs.train(2, 0, 0.05, 0.9, STEPS, 0, data)),
                              flat(hs.train(1, 0, 0.05, 0.9, STEPS, 0, data)))
