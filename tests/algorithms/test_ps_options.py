"""Bad input to the fault-tolerant algorithms gets a clear error naming what is wrong: unknown option
values, K < 0, servers >= world size, and a process with another model's shapes (refused on both sides,
over real sockets, by a real server or peer process)."""

from __future__ import annotations

import json

import pytest
import torch

import algorithms
from algorithms.ps import layout, wire
from algorithms.ps.client import WorkerRefusedError
from tests.algorithms.problem import make_inner, make_model
from tests.launch import SECRET, finish, independent

WORKER = "tests.algorithms.workers.ps_rules"


def _env(monkeypatch, rank: int, world: int, base: int = 29000) -> None:
    monkeypatch.setenv(layout.RANK_ENV, str(rank))
    monkeypatch.setenv(layout.WORLD_ENV, str(world))
    monkeypatch.setenv(layout.ADDRESS_ENV, f"127.0.0.1:{base}")
    monkeypatch.setenv(layout.SECRET_ENV, SECRET)  # the run's, as tests.launch.independent gives its processes


def _build(algorithm: str, model=None, **options):
    model = model or make_model(seed=1)
    return algorithms.CommOptimizer(make_inner("sgd", model.parameters()), algorithm=algorithm, model=model, **options)


@pytest.mark.parametrize(
    "algorithm,options,words",
    [
        ("asyncps", {"staleness_bound": -1}, "staleness_bound must be >= 0"),
        ("ssp", {"staleness_bound": -2}, "staleness_bound must be >= 0"),
        ("ssp", {"staleness_bound": 1.5}, "staleness_bound must be an integer"),
        ("asyncps", {"pull_every": 0}, "pull_every must be >= 1"),
        ("syncps", {"polyak_alpha": 1.5}, "polyak_alpha must be in [0.0, 1.0]"),
        ("syncps", {"codec": "onebit"}, "codec must be None or 'int8'"),
        ("asyncps", {"codec": "fp4"}, "codec 'fp4' is not a codec name"),
        ("asyncps", {"worker_timeout": 0}, "worker_timeout must be in"),
        ("asyncps", {"servers": 0}, "servers must be >= 1"),
        ("syncps", {"staleness_bound": 2}, "unknown option 'staleness_bound' for algorithm 'syncps'"),
        ("asyncps", {"resume": "yes"}, "resume must be True or False"),
    ],
)
def test_bad_options_are_refused_before_any_socket(monkeypatch, algorithm, options, words):
    _env(monkeypatch, 1, 3)
    with pytest.raises(algorithms.OptionError, match=_escape(words)):
        _build(algorithm, **options)


def _escape(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("servers,world", [(1, 1), (2, 2), (3, 2)])
def test_servers_must_leave_a_worker(monkeypatch, servers, world):
    _env(monkeypatch, 0, world, layout.free_base_port(world))
    with pytest.raises(
        algorithms.OptionError, match=f"servers={servers} leaves no worker in a world of {world} processes"
    ):
        _build("syncps", servers=servers)


def test_servers_cannot_outnumber_the_parameter_tensors(monkeypatch):
    _env(monkeypatch, 0, 6, layout.free_base_port(6))  # the problem's MLP has 4 parameter tensors
    with pytest.raises(algorithms.OptionError, match="servers=5: the model has 4 parameter tensors"):
        _build("asyncps", servers=5)


def test_bad_layout_environment(monkeypatch):
    _env(monkeypatch, 3, 2)
    with pytest.raises(ValueError, match="PYCOMM_PS_RANK=3 is outside a world of PYCOMM_PS_WORLD=2"):
        _build("asyncps")
    _env(monkeypatch, 1, 2)
    monkeypatch.setenv(layout.ADDRESS_ENV, "nohostport")
    with pytest.raises(ValueError, match="PYCOMM_PS_ADDRESS=.nohostport. is not valid: expected HOST:PORT"):
        _build("asyncps")


@pytest.mark.timeout(300)
def test_worker_with_another_model_is_refused_on_both_sides(tmp_path, monkeypatch):
    server = independent(2, WORKER, "asyncps", json.dumps({"worker_timeout": 20}), "0", str(tmp_path), "sgd", ranks=[0])
    _env(monkeypatch, 1, 2, server[0].base_port)
    other = torch.nn.Sequential(torch.nn.Linear(6, 11), torch.nn.Tanh(), torch.nn.Linear(11, 3))
    with pytest.raises(
        WorkerRefusedError, match="refused worker 1: worker 1's model has other shapes/dtypes than the server's"
    ) as refused:
        _build("asyncps", model=other, worker_timeout=20)
    ((code, _, err),) = finish(server)
    assert "started with another model or optimizer; refused" in err
    # the server's signature is never sent to the refused worker
    assert "checksum" not in str(refused.value) and wire.signature(list(make_model(seed=1).parameters())) not in str(
        refused.value
    )
    assert torch.load(tmp_path / "rank0.pt")["summary"]["refused"].keys() == {1}


@pytest.mark.timeout(300)
def test_ssp_peer_with_another_model_is_refused_on_both_sides(tmp_path, monkeypatch):
    peer = independent(2, WORKER, "ssp", json.dumps({"worker_timeout": 20}), "4", str(tmp_path), "sgd", ranks=[0])
    _env(monkeypatch, 1, 2, peer[0].base_port)
    other = torch.nn.Sequential(torch.nn.Linear(6, 11), torch.nn.Tanh(), torch.nn.Linear(11, 3))
    with pytest.raises(WorkerRefusedError, match="rank 0's model has other shapes/dtypes than rank 1's"):
        _build("ssp", model=other, worker_timeout=20)
    ((code, _, err),) = finish(peer, expect_ok=False)
    assert (
        code != 0
        and "rank 1's model has other shapes/dtypes than rank 0's" in err
        and "started with another model" in err
    )
