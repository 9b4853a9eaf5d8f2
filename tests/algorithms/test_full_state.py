"""State dicts across ranks (tests/algorithms/workers/full_state.py): opt.full_state_dict() of mbsgd, zero2 and
zero3 written on 2 (4) ranks loads with load_full_state_dict on 3 (1) ranks into each of them and trains on
as the unsplit model does, and its model part loads into a plain torch model; a sharded or per-rank
state_dict() loaded on another rank is refused, naming who saved it and full_state_dict; plsgd's full state
is its ranks' mean. In-process: a
full state that is not one is refused."""

from __future__ import annotations

import tempfile

import pytest
import torch

import algorithms
from tests.algorithms.runs import case
from tests.algorithms.workers.full_state import METHODS

SAVED_ON = {2: tempfile.mkdtemp(prefix="full-state-2-"), 4: tempfile.mkdtemp(prefix="full-state-4-")}
# what each world size's one launch runs: the 2-rank one serves every refuse/average case too
SAVE_MODES = {2: "save,refuse", 4: "save"}


@pytest.fixture(autouse=True)
def one_rank_world() -> None:
    import pycomm

    pycomm.init()


@pytest.mark.mpi
@pytest.mark.parametrize("saved_on, loaded_on", [(2, 3), (4, 1)])
@pytest.mark.parametrize("saved", METHODS)
@pytest.mark.parametrize("method", METHODS)
def test_full_state_loads_on_another_number_of_ranks_and_method(saved_on, loaded_on, saved, method):
    directory = SAVED_ON[saved_on]
    assert all(r["ok"] for r in case("full_state", saved_on, "save", SAVE_MODES[saved_on], directory))
    for rank, res in enumerate(case("full_state", loaded_on, f"{saved}_to_{method}", "load", directory)):
        assert res["ok"], (rank, res)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["zero2", "zero3", "plsgd"])
def test_another_ranks_state_is_refused_at_load(method):
    for rank, res in enumerate(case("full_state", 2, f"refuse_{method}", SAVE_MODES[2], SAVED_ON[2])):
        assert res["ok"], (rank, res)


@pytest.mark.mpi
def test_per_rank_full_state_is_the_ranks_mean():
    for rank, res in enumerate(case("full_state", 2, "average_plsgd", SAVE_MODES[2], SAVED_ON[2])):
        assert res["ok"], (rank, res)


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"state": {}, "param_groups": []}, "expected the {'model'"),
        ({"model": {}, "optimizer": {}}, "lacks parameter 'weight'"),
    ],
)
def test_what_is_not_a_full_state_is_refused(bad, words):
    model = torch.nn.Linear(3, 2)
    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm="mbsgd", model=model)
    with pytest.raises((TypeError, ValueError), match=words):
        opt.load_full_state_dict(bad)
