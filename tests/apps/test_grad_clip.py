"""apps.train's train.grad_clip goes through the optimizer's own clip_grad_norm_ for every algorithm (one
rank, in process): the norm it returns is torch's on the model's gradient, and the step moves the
parameters by at most lr * grad_clip, also where the gradients are sharded (zero2, zero3)."""

from __future__ import annotations

import copy

import pytest
import torch

import algorithms
from apps.parallel import Layout

LR, CLIP = 1.0, 1e-3


@pytest.fixture(autouse=True)
def one_rank_world() -> None:
    import pycomm

    pycomm.init()


@pytest.mark.parametrize("algorithm", ["none", "mbsgd", "plsgd", "easgd", "diloco", "zero1", "zero2", "zero3"])
def test_train_grad_clip_clips_through_the_optimizer(algorithm: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    x = torch.randn(16, 6)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    opt = sgd if algorithm == "none" else algorithms.CommOptimizer(sgd, algorithm=algorithm, model=model)
    twin(x).square().mean().backward()
    want = torch.nn.utils.get_total_norm([p.grad for p in twin.parameters()])
    before = [p.detach().clone() for p in twin.parameters()]
    model(x).square().mean().backward()
    norm = Layout(None, None, None, model).clip_grad_norm_(opt, model, CLIP)
    opt.step()
    after = opt.full_state_dict()["model"] if algorithm == "zero3" else model.state_dict()
    moved = torch.cat([(a - b).reshape(-1) for a, b in zip(after.values(), before)])
    assert torch.is_tensor(norm) and torch.allclose(norm.double(), want.double(), rtol=1e-5), (norm, want)
    assert float(moved.norm()) <= LR * CLIP * 1.001 < float(want)
