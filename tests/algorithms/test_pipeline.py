"""algorithms.Pipeline: on 2, 3 and 4 real ranks (one stage each) and on 4 ranks as 2 stages x 2 replicas,
loss and every gradient equal the unsplit model's on one process (float64, rtol 1e-5), for GPipe, 1F1B
and interleaved 1F1B (2 chunks per stage),
micro-batches fewer than, equal to and more than the stages; the bubble measured in time slots from the
executed order and the peak live activations match (p - 1)/(m + p - 1) and p (1F1B) / m (GPipe) within
15%; bad input raises on every rank. In-process: the action lists, the split, the slot replay."""

from __future__ import annotations

import pytest
import torch

import algorithms
import pycomm
from algorithms import traits
from algorithms.pipeline import action_list, compute_order, expected_bubble, slot_bubble
from algorithms.pipeline.partition import balanced_bounds, layers_of, stage_bounds
from algorithms.pipeline.pipeline_schedules import RECV_B, RECV_F, Action, B, F
from tests.algorithms.pipeline_problem import close, make_batch, make_model, reference_step
from tests.algorithms.runs import case

SCHEDULES = ("gpipe", "1f1b")


def stage_cases(p: int) -> list[str]:
    names = [f"{s}_m{m}_{k}" for s in SCHEDULES for m in sorted({1, p - 1, 2 * p}) for k in ("mlp", "tokens")]
    names += [f"{s}_{what}" for s in SCHEDULES for what in ("split", "shape")]
    names += ["interleaved_balanced", "interleaved_split_m_p", "interleaved_shape"]
    return names + ["too_few_layers", "indivisible_batch", "bad_split", "usable_after_error", "interleaved_bad_m"]


def modes(p: int) -> tuple[str, ...]:
    """The worker's modes run by the one launch on p ranks: on 4 ranks the data-parallel cases join the
    stage cases (a launch of 4 ranks costs about as much CPU as its cases)."""
    return ("stages", "dp") if p == 4 else ("stages",)


@pytest.mark.mpi
@pytest.mark.parametrize("p, name", [(p, n) for p in (2, 3, 4) for n in stage_cases(p)])
def test_pipeline_stages(p: int, name: str) -> None:
    for rank, res in enumerate(case("pipeline", p, name, *modes(p))):
        assert res["ok"], f"rank {rank}: {res}"
        if "bubble" in res:
            assert res["bubble_ok"] and res["peak_ok"], f"rank {rank}: {res}"


@pytest.mark.mpi
@pytest.mark.parametrize(
    "name", ["dp_gpipe", "dp_gpipe_tokens", "dp_1f1b", "dp_1f1b_tokens", "dp_interleaved", "dp_mbsgd_wrapper"]
)
def test_pipeline_with_data_parallel(name: str) -> None:
    for rank, res in enumerate(case("pipeline", 4, name, *modes(4))):
        assert res["ok"] and res["bubble_ok"] and res["peak_ok"], f"rank {rank}: {res}"


# ---- in one process ----------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("p, m", [(1, 3), (2, 1), (3, 2), (4, 4), (4, 9)])
def test_action_lists_are_complete_and_receive_ahead(schedule: str, p: int, m: int) -> None:
    for s in range(p):
        acts = action_list(schedule, s, p, m)
        assert sorted(a.mb for a in acts if a.kind == F) == list(range(m))
        assert sorted(a.mb for a in acts if a.kind == B) == list(range(m))
        for a in acts:  # every receive is posted before the compute that waits for it
            if a.kind in (RECV_F, RECV_B):
                assert acts.index(a) < acts.index(Action(F if a.kind == RECV_F else B, a.mb))
        assert (s == 0) == (not any(a.kind == RECV_F for a in acts))
        assert (s == p - 1) == (not any(a.kind == RECV_B for a in acts))
    orders = [compute_order(schedule, s, p, m) for s in range(p)]
    assert slot_bubble(orders) == pytest.approx(expected_bubble(p, m))


@pytest.mark.parametrize("p, m, v", [(2, 2, 2), (2, 4, 3), (3, 6, 2), (4, 8, 2), (4, 4, 4)])
def test_interleaved_action_lists(p: int, m: int, v: int) -> None:
    orders = []
    for s in range(p):
        acts = action_list("interleaved_1f1b", s, p, m, v)
        for kind in (F, B):
            done = sorted((a.chunk, a.mb) for a in acts if a.kind == kind)
            assert done == [(c, i) for c in range(v) for i in range(m)]
        for a in acts:  # receives ahead of their compute, none for global chunk 0 (forward) / the last (backward)
            if a.kind in (RECV_F, RECV_B):
                assert acts.index(a) < acts.index(Action(F if a.kind == RECV_F else B, a.mb, a.chunk))
                assert (a.chunk * p + s) != (0 if a.kind == RECV_F else p * v - 1)
        orders.append(compute_order("interleaved_1f1b", s, p, m, v))
    assert slot_bubble(orders) == pytest.approx(expected_bubble(p, m, v))
    assert expected_bubble(p, m, v) < expected_bubble(p, m)


def test_1f1b_order_and_a_wrong_order_shows_a_larger_bubble() -> None:
    assert [repr(a) for a in compute_order("1f1b", 0, 3, 4)] == ["f0", "f1", "f2", "b0", "f3", "b1", "b2", "b3"]
    # every stage without warm-up (one micro-batch in flight at a time): a valid order with a large bubble
    serial = [compute_order("1f1b", 2, 3, 4) for _ in range(3)]
    assert slot_bubble(serial) > expected_bubble(3, 4) * 1.15
    # stage 1 runs micro-batch 0's backward last, after forward 3, which stage 0 sends only after it got
    # backward 0 back: an order that deadlocks, which the replay refuses
    good = [compute_order("1f1b", s, 3, 4) for s in range(3)]
    late = [a for a in good[1] if a != Action(B, 0)] + [Action(B, 0)]
    with pytest.raises(RuntimeError, match="cannot be replayed"):
        slot_bubble([good[0], late, good[2]])


def test_split_balances_parameters_and_checks_indices() -> None:
    assert balanced_bounds([10, 1, 1, 10, 5, 5], 3) == [0, 2, 4, 6]
    assert balanced_bounds([0, 0, 0], 3) == [0, 1, 2, 3]
    layers = layers_of(make_model("mlp", 1))
    assert stage_bounds(layers, 3, [2, 6]) == [0, 2, 6, 9]
    for bad in ([6, 2], [0, 4], [2], [2, 9]):
        with pytest.raises(ValueError, match="strictly increasing layer indices"):
            stage_bounds(layers, 3, bad)
    with pytest.raises(TypeError, match="split must be a list of ints"):
        stage_bounds(layers, 3, "2,6")
    with pytest.raises(ValueError, match="fewer than the 10 pipeline stages"):
        stage_bounds(layers, 10)
    with pytest.raises(TypeError, match="nn.Sequential or a list of modules"):
        layers_of(torch.nn.Linear(2, 2))


@pytest.fixture(scope="module")
def world() -> object:
    pycomm.init()
    return pycomm.world()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_one_stage_equals_the_model(world: object, schedule: str) -> None:
    model = make_model("tokens", 1)
    pipe = algorithms.Pipeline(model, world, schedule=schedule, microbatches=4)
    ref = make_model("tokens", 1)
    ref_loss, ref_grads = reference_step(ref, "tokens", 0)
    x, y, loss_fn = make_batch("tokens", 0)
    loss = pipe.train_step(x, y, loss_fn)
    assert close(torch.tensor(loss), torch.tensor(ref_loss))
    assert all(close(p.grad, ref_grads[n]) for n, p in pipe.stage_module.named_parameters())
    assert pipe.stats()["peak_live"] == [4 if schedule == "gpipe" else 1] and pipe.stats()["bubble"] == 0


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"schedule": "zb"}, ValueError, "schedule must be one of gpipe, 1f1b"),
        ({"microbatches": 0}, ValueError, "microbatches must be a positive int"),
        ({"data_parallel": 2}, ValueError, "data_parallel=2 must divide"),
        ({"data_parallel": 0}, ValueError, "data_parallel must be a positive int"),
        ({"schedule": "interleaved_1f1b"}, ValueError, "interleaved_1f1b needs at least 2 stages"),
        ({"schedule": "interleaved_1f1b", "chunks": 1}, ValueError, "chunks .* must be an int >= 2"),
    ],
)
def test_bad_arguments(world: object, kwargs: dict, exc: type, words: str) -> None:
    with pytest.raises(exc, match=words):
        algorithms.Pipeline(make_model("mlp", 1), world, **kwargs)


def test_bad_step_input(world: object) -> None:
    pipe = algorithms.Pipeline(make_model("mlp", 1), world, microbatches=5)
    x, y, loss_fn = make_batch("mlp", 0)
    with pytest.raises(ValueError, match="x has a batch of 24 samples, which does not divide into microbatches=5"):
        pipe.train_step(x, y, loss_fn)
    with pytest.raises(TypeError, match="x must be a batch tensor on the first stage"):
        pipe.train_step(None, y, loss_fn)
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        pipe.train_step(x[:20], y[:20], None)
    with pytest.raises(RuntimeError, match="no train_step has run yet"):
        pipe.stats()


def test_declares_pipeline_training() -> None:
    assert algorithms.Pipeline.training == traits.PIPELINE
    traits.check(algorithms.Pipeline)
