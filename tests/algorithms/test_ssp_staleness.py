"""ssp's staleness_correction (algorithms/ps/stale_steps.py) on real independent processes:
with K = 2 and one rank 3x slower, every replica ends where an independent replay of the rule ends, the
replay taking each rank's gradient of step t on the parameters its staleness says (as each rank
reported it) and applying the correction; with K = 0 every correction is mbsgd exactly; bad values are
refused."""

from __future__ import annotations

import pytest
import torch

import algorithms
from algorithms import OptionError
from algorithms.ps.stale_steps import compensated_momentum
from tests.algorithms.problem import loss_on, make_inner, make_model
from tests.algorithms.ps_cases import case, flat, register, results, simulate

WORLD = 3
CORRECTIONS = [None, "momentum", "scale"]
# run by the one launch of independent processes of tests/algorithms/ps_cases.py
CASES = register(
    "ssp-correction",
    {
        **{
            f"bound-2-{c}": case(
                "ssp", WORLD, {"staleness_bound": 2, "staleness_correction": c}, steps=24, slow=(1, 3.0)
            )
            for c in CORRECTIONS
        },
        **{
            f"bound-0-{c}": case("ssp", WORLD, {"staleness_bound": 0, "staleness_correction": c})
            for c in CORRECTIONS[1:]
        },
    },
)


def replay(seen: list[list[int]], inner: str, correction: str | None) -> torch.Tensor:
    """ssp from its rule: step t averages every rank's gradient of step t computed on the parameters
    after t - s averaged steps (s: that rank's staleness at step t), corrected, through one step of the
    inner optimizer. Starts from rank 0's model (seed 1)."""
    model, probe = make_model(seed=1), make_model(seed=1)
    opt = make_inner(inner, model.parameters())
    momentum = opt.param_groups[0]["momentum"]
    history = [flat(model.parameters()).clone()]
    for t in range(len(seen[0])):
        stale = [seen[r][t] for r in range(WORLD)]
        grads = []
        for r, s in enumerate(stale):
            torch.nn.utils.vector_to_parameters(history[t - s], probe.parameters())
            probe.zero_grad()
            loss_on(probe, r, t).backward()
            g = torch.cat([p.grad.reshape(-1) for p in probe.parameters()])
            grads.append(g / (1 + s) if correction == "scale" else g)
        mean = torch.stack(grads).mean(0)
        mu = compensated_momentum(momentum, sum(stale) / WORLD) if correction == "momentum" else momentum
        opt.param_groups[0]["momentum"] = mu
        offset = 0
        for p in model.parameters():
            p.grad = mean[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        opt.step()
        history.append(flat(model.parameters()).clone())
    return history[-1]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("correction", CORRECTIONS)
def test_ssp_correction_replays_the_observed_staleness(correction):
    ranks = results("ssp-correction", f"bound-2-{correction}")  # 24 steps, rank 1 3x slower
    seen = [r["seen"] for r in ranks]
    assert max(map(max, seen)) == 2, seen  # the fast ranks did run ahead: the correction acted
    expected = replay(seen, "momentum", correction)
    plain = replay(seen, "momentum", None)
    if correction is not None:  # it changes the result the replay predicts
        assert float((expected - plain).abs().max()) > 1e-4
    for r in ranks:
        torch.testing.assert_close(flat(r["params"]), expected, rtol=0, atol=1e-5)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("correction", CORRECTIONS[1:])
def test_ssp_with_bound_0_and_a_correction_is_mbsgd(correction):
    expected = simulate([0, 1, 2], 8, "momentum")
    for r in results("ssp-correction", f"bound-0-{correction}"):
        torch.testing.assert_close(flat(r["params"]), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("value", ["Momentum", "1/(1+s)", 1, True])
def test_bad_correction_refused(value):
    model = torch.nn.Linear(2, 2)
    with pytest.raises(OptionError, match="staleness_correction"):
        algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), algorithm="ssp", model=model, staleness_correction=value
        )
