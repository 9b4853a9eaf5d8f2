"""Bad input to the ZeRO stages raises clearly, naming what was wrong (single process, 1 rank)."""

from __future__ import annotations

import pytest
import torch

import algorithms
import pycomm
from algorithms import OptionError
from algorithms.checkpointing import CheckpointError


@pytest.fixture(scope="module")
def comm() -> pycomm.Communicator:
    pycomm.init()
    return pycomm.world()


def adamw(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def test_zero3_needs_model(comm: pycomm.Communicator) -> None:
    with pytest.raises(OptionError, match="zero3 needs model="):
        algorithms.CommOptimizer(adamw(torch.nn.Linear(2, 2)), algorithm="zero3", comm=comm)


def test_units_must_be_submodules(comm: pycomm.Communicator) -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.raises(OptionError, match="submodules of model="):
        algorithms.CommOptimizer(adamw(model), algorithm="zero3", comm=comm, model=model, units=[torch.nn.Linear(2, 2)])


@pytest.mark.parametrize("algorithm", ["zero1", "zero2", "zero3"])
def test_optimizer_params_must_be_the_models(comm: pycomm.Communicator, algorithm: str) -> None:
    with pytest.raises(ValueError, match="parameter 0 .* is not a parameter of model="):
        algorithms.CommOptimizer(
            adamw(torch.nn.Linear(3, 2)), algorithm=algorithm, comm=comm, model=torch.nn.Linear(3, 2)
        )


def test_bad_param_dtype(comm: pycomm.Communicator) -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.raises(OptionError, match="param_dtype must be None or one of"):
        algorithms.CommOptimizer(adamw(model), algorithm="zero2", comm=comm, model=model, param_dtype=torch.int8)


def test_hybrid_node_size_must_divide_world(comm: pycomm.Communicator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCOMM_RANKS_PER_NODE", "2")  # 1 rank cannot form nodes of 2
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="PYCOMM_RANKS_PER_NODE=2 does not divide this communicator's 1 ranks"):
        algorithms.CommOptimizer(adamw(model), algorithm="zero2", comm=comm, model=model, hybrid=True)


def test_load_sharded_needs_shards(comm: pycomm.Communicator, tmp_path) -> None:
    model = torch.nn.Linear(2, 2)
    opt = algorithms.CommOptimizer(adamw(model), algorithm="zero2", comm=comm, model=model)
    with pytest.raises(CheckpointError, match=r"is incomplete \(no manifest.json\)"):
        opt.load_sharded_state_dict(tmp_path)
    with pytest.raises(ValueError, match="ranks \\[1\\] of a 2-rank checkpoint"):
        shard = opt.sharded_state_dict()
        opt.load_sharded_state_dict([{**shard, "rank": 1, "world_size": 2}])
    with pytest.raises(ValueError, match="different saves"):
        opt.load_sharded_state_dict(
            [{**shard, "rank": 0, "world_size": 2, "steps": 5}, {**shard, "rank": 1, "world_size": 2, "steps": 6}]
        )


def test_single_rank_zero3_trains_like_adamw(comm: pycomm.Communicator) -> None:
    """On one rank every stage is plain AdamW (one shard holds everything)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    ref.load_state_dict(model.state_dict())
    opt = algorithms.CommOptimizer(adamw(model), algorithm="zero3", comm=comm, model=model)
    ref_opt = adamw(ref)
    x = torch.randn(5, 4)
    for _ in range(3):
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    full = opt.full_state_dict()["model"]
    for name, value in ref.state_dict().items():
        assert torch.allclose(full[name], value, atol=1e-6), name
