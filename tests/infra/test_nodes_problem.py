"""benchmarks/nodes_problem.py defines each problem twice, once as apps.train's options (pycomm's cases) and once
as the peers' own model, data and optimizer: both sides must train the same thing, or the race compares two
problems. For each problem, apps.train's config built from its options gives the same model (names, shapes and
the same initial values from the same seed), the same training and eval splits, the same optimizer settings and
a cosine schedule over the run's steps with no warm-up and no floor."""

from __future__ import annotations

import pytest
import torch

from apps.config import loading
from apps.data import DATASETS
from apps.models import MODELS
from apps.optim import build_optimizer
from benchmarks.nodes_problem import BATCH, PROBLEMS, Problem

SETTINGS = ("lr", "momentum", "betas", "weight_decay", "eps", "nesterov")


def apps_side(problem: Problem) -> tuple[object, torch.nn.Module, torch.optim.Optimizer, object]:
    args = list(problem.apps_options)
    paths = [args[i + 1] for i, a in enumerate(args) if a == "--config"]
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "-o"]
    cfg = loading.load(paths or None, [*overrides, "train.epochs=0", "train.max_steps=100"], world_size=4)
    data_options = {**cfg.data.options, **({"path": cfg.data.path} if cfg.data.path is not None else {})}
    splits = DATASETS.build(cfg.data.name, data_options)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model.name, cfg.model.options, splits.info)
    return cfg, model, build_optimizer(cfg.optim, model), splits


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_apps_train_and_the_peers_train_the_same_problem(name: str) -> None:
    problem = PROBLEMS[name]
    cfg, apps_model, apps_opt, apps_splits = apps_side(problem)
    torch.manual_seed(0)
    mine = problem.model()
    theirs = dict(apps_model.named_parameters())
    assert [(n, p.shape) for n, p in mine.named_parameters()] == [(n, p.shape) for n, p in theirs.items()]
    assert all(torch.equal(p, theirs[n]) for n, p in mine.named_parameters())
    splits = problem.splits()
    assert (len(splits.train), len(splits.eval)) == (len(apps_splits.train), len(apps_splits.eval))
    x, y = splits.train.batch(torch.arange(3))[:2]
    ax, ay = apps_splits.train.batch(torch.arange(3))[:2]
    assert torch.equal(x, ax) and torch.equal(y, ay)
    opt = problem.optimizer(mine)
    assert type(opt) is type(apps_opt)
    for group in apps_opt.param_groups:  # apps splits decayed and plain parameters; the settings must agree
        for key in SETTINGS:
            if key in group:
                assert opt.param_groups[0][key] == pytest.approx(group[key]), (key, group[key])
    assert cfg.data.batch_size == BATCH
    assert cfg.train.grad_clip is None
    s = cfg.schedule
    assert (s.name, s.warmup_steps or 0, s.warmup_epochs, s.min_lr, s.total_steps) == ("cosine", 0, 0.0, 0.0, None)


def test_the_fragments_cover_the_model_once() -> None:
    """torchft's DiLoCo and pycomm's bare DiLoCo sync these three parts: together every parameter, none twice."""
    for problem in PROBLEMS.values():
        model = problem.model()
        parts = problem.fragments(model)
        ids = [id(p) for f in parts for p in f.parameters()]
        assert len(parts) == 3 and len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}
