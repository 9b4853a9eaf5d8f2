"""apps/stage_checkpoint.py in one process, on a model cut by hand into two stages: a stage saves its layers
and what no stage holds under the whole model's names, loads only those (another stage's file is refused
naming the keys), and a resume on another cut of the layers or, with ZeRO inside a method, on another
dp_replicate x dp_shard is refused naming both. The multi-rank paths: test_resume_resize.py (pp2 x dp2 <->
pp2 x dp1), test_parallel.py (a pipelined run served whole)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from algorithms.checkpointing import CheckpointError, Placement
from apps import stage_checkpoint


class Cut(nn.Module):
    """Two linear layers (the pipeline's) and a buffer outside them (the same on every stage)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
        self.register_buffer("scale", torch.tensor([2.0]))

    def pipeline_layers(self) -> nn.Sequential:
        return self.net


def stage(model: Cut, index: int, sharding: str | None = None) -> SimpleNamespace:
    """What stage_checkpoint reads of an apps.parallel.Layout: stage `index` of the cut [0, 1, 2]."""
    return SimpleNamespace(
        pipe=SimpleNamespace(stage=index, bounds=[0, 1, 2]),
        module=nn.Sequential(model.net[index]),
        cfg=SimpleNamespace(sharding=sharding),
        mesh=SimpleNamespace(shape={"pp": 2, "dp_replicate": 2, "dp_shard": 2}),
        own_values=lambda opt, gathered=None: {},
    )


def test_a_stage_saves_and_loads_its_part_under_the_models_names() -> None:
    model = Cut()
    first, second = (stage_checkpoint.model_state(stage(model, i), None, model) for i in (0, 1))
    assert set(first) == {"net.0.weight", "net.0.bias", "scale"}
    assert set(second) == {"net.1.weight", "net.1.bias", "scale"}
    assert {**first, **second}.keys() == model.state_dict().keys()  # the stages join into the whole model
    fresh = Cut()
    with torch.no_grad():
        fresh.net[1].weight.zero_()
    saved = {k: v + 1 for k, v in second.items()}
    stage_checkpoint.load_model(stage(fresh, 1), fresh, saved)
    assert torch.equal(fresh.net[1].weight, saved["net.1.weight"]) and torch.equal(fresh.scale, saved["scale"])
    assert torch.equal(fresh.net[0].weight, Cut().net[0].weight)  # the other stage's layers untouched
    with pytest.raises(CheckpointError, match=r"does not fit this model \(pipeline stage 0\): missing \['net.0.bias'"):
        stage_checkpoint.load_model(stage(fresh, 0), fresh, second)
    buffers_only = Cut()
    stage_checkpoint.load_model(stage(buffers_only, 1), buffers_only, saved, parameters=False)
    assert torch.equal(buffers_only.scale, saved["scale"]) and torch.equal(
        buffers_only.net[1].weight, Cut().net[1].weight
    )


def test_another_cut_or_zero_inside_on_other_sizes_is_refused_naming_both() -> None:
    model = Cut()
    written = Placement.saved({"pp": 2, "dp_replicate": 2, "dp_shard": 2})
    stage_checkpoint.check_resume(stage(model, 0), written, stage_checkpoint.manifest_facts(stage(model, 0)))
    with pytest.raises(
        CheckpointError,
        match=r"cut the model's layers at \[0, 2, 3\] \(parallel.split=\[2\]\); this "
        r"run cuts them at \[0, 1, 2\]: resume with parallel.split=\[2\]",
    ):
        stage_checkpoint.check_resume(stage(model, 0), written, {"pipeline_bounds": [0, 2, 3]})
    other = Placement.saved({"pp": 2, "dp_replicate": 4, "dp_shard": 1})
    stage_checkpoint.check_resume(stage(model, 0), other, {})  # no ZeRO inside: the placement decides
    with pytest.raises(
        CheckpointError,
        match=r"written on dp_replicate=4 x dp_shard=1 with zero3 inside dp_shard; "
        r"this run has dp_replicate=2 x dp_shard=2",
    ):
        stage_checkpoint.check_resume(stage(model, 0, "zero3"), other, {})
