"""zero1 with staleness_bound K on real ranks (mpirun, 3 ranks): K = 0 is zero1 bit for bit;
K = 2 equals an independent simulation of the delayed rule x_{t+1} = x_t - opt(mean_r g_r(x_{t-K})),
also with one rank 3x slower; the staleness reported is min(t, K) per step; at most K gradient copies
stay in flight between steps; a run resumed from a checkpoint (state_dict or sharded files) equals the
run that wrote it; bad values are refused naming the option."""

from __future__ import annotations

import pytest
import torch

import algorithms
from algorithms import OptionError
from tests.algorithms.problem import loss_on, lr_at, make_inner, make_model
from tests.algorithms.workers.zero_staleness import CLIP, CUT, INNER, STEPS, K
from tests.launch import mpirun

WORLD = 3
TOL = 1e-6  # a reduce-scatter sums in another order than the simulation's mean


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("zero_staleness")
    mpirun(WORLD, "tests.algorithms.workers.zero_staleness", str(out), "1", timeout=600)
    names = ("k0", "k2", "k2_slow", "k2_clip", "resume")
    return {n: [torch.load(out / f"{n}_rank{r}.pt", weights_only=False) for r in range(WORLD)] for n in names}


def simulate(bound: int, steps: int, drained_at: int = 0, clip: float | None = None) -> list[torch.Tensor]:
    """The delayed rule from its definition: the gradient of step t is every rank's gradient on the
    parameters after max(0, t - bound) updates, averaged, and stepped (with step t's LR) into the newest.
    `drained_at`: every update was applied before that step (a checkpoint), the delay restarting there;
    `clip`: the mean gradient clipped to that global norm (torch's clip_grad_norm_) before the step."""
    model, probe = make_model(seed=1), make_model(seed=1)
    opt = make_inner(INNER, model.parameters())
    base = opt.param_groups[0]["lr"]
    history = [[p.detach().clone() for p in model.parameters()]]
    for t in range(steps):
        grads = []
        for r in range(WORLD):
            with torch.no_grad():
                for p, v in zip(probe.parameters(), history[max(drained_at if t >= drained_at else 0, t - bound)]):
                    p.copy_(v)
            probe.zero_grad()
            loss_on(probe, r, t).backward()
            grads.append([p.grad.clone() for p in probe.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = torch.stack([g[i] for g in grads]).mean(0)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.param_groups[0]["lr"] = lr_at(t, base)
        opt.step()
        history.append([p.detach().clone() for p in model.parameters()])
    return history[-1]


def assert_params(got: list[torch.Tensor], expected: list[torch.Tensor], atol: float = TOL) -> None:
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=atol)


@pytest.mark.mpi
def test_bound_0_is_zero1_bit_for_bit(results):
    for r in results["k0"]:
        for a, b in zip(r["default"]["params"], r["bound0"]["params"]):
            assert torch.equal(a, b)
        assert r["bound0"]["stats"]["max_staleness"] == 0
    assert_params(results["k0"][0]["default"]["params"], simulate(0, STEPS))


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["k2", "k2_slow"])
def test_bound_2_follows_the_delayed_rule(results, case):
    expected = simulate(K, STEPS)
    synchronous = simulate(0, STEPS)
    assert max(float((a - b).abs().max()) for a, b in zip(expected, synchronous)) > 1e-3  # K matters here
    for r in results[case]:
        assert_params(r["params"], expected)
        # before close the model misses the last K updates: it holds the simulation's x_{STEPS-K}
        assert_params(r["before_close"], simulate(K, STEPS - K))


@pytest.mark.mpi
def test_clipping_applies_to_each_step_when_it_is_completed(results):
    expected = simulate(K, STEPS, clip=CLIP)
    assert max(float((a - b).abs().max()) for a, b in zip(expected, simulate(K, STEPS))) > 1e-4  # it clipped
    for r in results["k2_clip"]:
        assert_params(r["params"], expected)
        norms = r["norms"]  # the norm of the latest completed step: none for the first K steps
        assert all(n != n for n in norms[: K + 1]) and all(n > CLIP for n in norms[K + 1 :]), norms


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["k2", "k2_slow"])
def test_staleness_reported_and_buffers_bounded(results, case):
    expected_hist = {str(s): 1 for s in range(K)} | {str(K): STEPS - K}
    for r in results[case]:
        stats = r["stats"]
        assert stats["max_staleness"] == K  # reached, never exceeded (slowed rank or not)
        assert stats["staleness_histogram"] == expected_hist
        assert stats["mean_staleness"] == pytest.approx(sum(range(K)) / STEPS + K * (STEPS - K) / STEPS)
        assert r["in_flight"] == [min(t + 1, K) for t in range(STEPS)]


@pytest.mark.mpi
def test_resume_equals_the_run_that_wrote_the_checkpoint(results):
    for r in results["resume"]:
        assert r["steps"] == [STEPS] * 3
        for a, b, c in zip(r["whole"], r["from_state_dict"], r["from_sharded"]):
            assert torch.equal(a, b) and torch.equal(a, c)
    # the checkpoint drained the steps in flight: steps 0..CUT-1 delayed, then the rest restarted at staleness 0
    expected = simulate(K, STEPS, drained_at=CUT)
    assert_params(results["resume"][0]["whole"], expected)


@pytest.mark.parametrize("value", [-1, 1.5, "2", True, None])
def test_bad_bound_refused(value):
    model = torch.nn.Linear(2, 2)
    with pytest.raises(OptionError, match="staleness_bound"):
        algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), algorithm="zero1", model=model, staleness_bound=value
        )


def test_zero2_has_no_bound():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(OptionError, match="staleness_bound"):
        algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), algorithm="zero2", model=model, staleness_bound=1
        )
