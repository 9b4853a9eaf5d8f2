"""DiLoCo in one process (a one-rank world: what does not need several ranks): option errors, fragments
strided over the layers, the bytes each step puts on the wire (one parameter set per period, spread
over F steps with fragments), rounds left in flight for sync_delay steps, QSR's period rule, a
checkpoint taken with a round in flight, bf16 parameters. The rule itself against the N-worker
simulation on real ranks: test_rules.py, test_resume.py, test_equivalences.py, test_codecs.py
(configurations diloco-* in configs.py)."""

from __future__ import annotations

import pytest
import torch

import algorithms
import pycomm
from algorithms import OptionError
from algorithms.fragments import layer_key, layers, strided
from apps.models.gpt import GPT
from tests.algorithms.test_qsr_periods import pycomm_round_ends, reference_round_ends, warmup_cosine


@pytest.fixture(autouse=True)
def one_rank_world() -> None:
    pycomm.init()


def layered(width: int = 16, depth: int = 4) -> torch.nn.Sequential:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for _ in range(depth):
        mods += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*mods)


def diloco(model: torch.nn.Module, **options) -> algorithms.DiLoCo:
    return algorithms.CommOptimizer(
        torch.optim.AdamW(model.parameters(), lr=1e-2), algorithm="diloco", model=model, **options
    )


def train(model: torch.nn.Module, opt, steps: int, on_step=None) -> None:
    g = torch.Generator().manual_seed(1)
    width = next(model.parameters()).shape[-1]
    for t in range(steps):
        x = torch.randn(8, width, generator=g).to(next(model.parameters()).dtype)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if on_step:
            on_step(t + 1)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"inner_steps": 0}, "inner_steps must be >= 1"),
        ({"inner_steps": "often"}, "inner_steps must be an integer >= 1 or 'qsr'"),
        ({"inner_steps": 4, "sync_delay": 4}, "sync_delay=4 must be < inner_steps=4"),
        ({"inner_steps": 2, "fragments": 3}, "fragments=3 must be <= inner_steps=2"),
        ({"inner_steps": 8, "alpha": 0.1}, "alpha set QSR's period rule, which applies only with inner_steps='qsr'"),
        ({"inner_steps": "qsr", "h_base": 2, "sync_delay": 2}, "sync_delay=2 must be < h_min=2"),
        ({"mixing": 1.5}, r"mixing must be in \[0.0, 1.0\]"),
        ({"outer_optimizer": "Adam", "outer_momentum": 0.5}, "outer_optimizer=Adam takes lr=outer_lr only"),
        ({"outer_optimizer": "Nesterov"}, "outer_optimizer 'Nesterov' is not a torch.optim optimizer"),
        ({"outer_optimizer": torch.nn.Linear}, "outer_optimizer must be None"),
        ({"outer_lr": -1}, r"outer_lr must be in \[0.0, inf\]"),
        ({"codec": "int3"}, "codec 'int3' is not a codec name"),
    ],
)
def test_bad_options_are_named(options, message) -> None:
    with pytest.raises(OptionError, match=message):
        diloco(layered(), **options)


def test_more_fragments_than_layers_is_refused() -> None:
    with pytest.raises(ValueError, match="fragments=5 is more than the model's 4 layers"):
        diloco(layered(), inner_steps=8, fragments=5)


def test_fragments_are_strided_over_the_gpt_layers() -> None:
    model = GPT(65, block_size=16, n_layer=4, n_head=2, n_embd=32, dropout=0.0)
    params = list(model.parameters())
    names = [n for n, _ in model.named_parameters()]
    keys = [layer_key(names[g[0]]) for g in layers(params, model)]
    assert keys == ["tok", "pos", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "norm"]
    frags = strided(layers(params, model), 3)
    assert [sorted({layer_key(names[i]) for i in f}) for f in frags] == [
        ["blocks.1", "norm", "tok"],
        ["blocks.2", "pos"],
        ["blocks.0", "blocks.3"],
    ]
    assert sorted(i for f in frags for i in f) == list(range(len(params)))
    assert layers(params, None) == [[i] for i in range(len(params))]  # without a model: one tensor each


@pytest.mark.parametrize("fragments", [1, 4])
def test_one_parameter_set_per_period_spread_over_the_fragments(fragments: int) -> None:
    """Each round is one all-reduce of its fragment's pseudo-gradient and nothing travels in between:
    per period the bytes of one parameter set; with F fragments of equal layers, on F steps of 1/F each.
    (Bytes as the core's op counters see them: a one-rank world's comm_stats() counts none sent.)"""
    model = layered()
    total = 4 * sum(p.numel() for p in model.parameters())
    opt = diloco(model, inner_steps=8, fragments=fragments)
    reduced = lambda: sum(op["bytes"] for op in pycomm.stats().values())  # noqa: E731
    per_step, calls, last = [], [], {"bytes": reduced(), "calls": opt.comm_stats()["calls"]}
    train(
        model,
        opt,
        24,
        lambda t: (
            per_step.append(reduced() - last["bytes"]),
            calls.append(opt.comm_stats()["calls"] - last["calls"]),
            last.update(bytes=reduced(), calls=opt.comm_stats()["calls"]),
        ),
    )
    assert max(per_step) == total // fragments
    assert [t + 1 for t, b in enumerate(per_step) if b] == [
        t for t in range(1, 25) if t % 8 in {(f * 8) // fragments for f in range(fragments)}
    ]
    assert sum(per_step) == 3 * total and set(calls) == {0, 1}
    assert opt.rounds == 3 * fragments


def test_sync_delay_leaves_the_round_in_flight_while_inner_steps_run() -> None:
    model = layered()
    opt = diloco(model, inner_steps=4, fragments=2, sync_delay=1, mixing=0.5)
    seen = {}
    train(model, opt, 8, lambda t: seen.update({t: dict(opt.in_flight)}))
    assert seen == {1: {}, 2: {1: 3}, 3: {}, 4: {0: 5}, 5: {}, 6: {1: 7}, 7: {}, 8: {0: 9}}


def test_a_checkpoint_with_a_round_in_flight_resumes_exactly() -> None:
    def run(cut: int | None) -> list[torch.Tensor]:
        model = layered()
        opt = diloco(model, inner_steps=4, fragments=2, sync_delay=2, mixing=0.5, codec="int4")
        if cut is None:
            train(model, opt, 12)
            return [p.detach().clone() for p in model.parameters()]
        train(model, opt, cut)
        state = {"model": model.state_dict(), "opt": opt.state_dict()}
        assert state["opt"]["algorithm_state"]["in_flight"].keys() == {0}  # started at 4, applied at 6
        residuals = state["opt"]["channel"]["residuals"]["fragment0"]  # one rank: the re-encoding's ("server")
        assert sum(float(r.abs().sum()) for r in residuals.values() if r is not None) > 0
        model = layered()
        opt = diloco(model, inner_steps=4, fragments=2, sync_delay=2, mixing=0.5, codec="int4")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        g = torch.Generator().manual_seed(1)
        for t in range(12):  # the same batches as the uninterrupted run
            x = torch.randn(8, 16, generator=g)
            if t < cut:
                continue
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().clone() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(run(None), run(5)))


def test_state_of_another_model_is_refused() -> None:
    state = diloco(layered(width=16), inner_steps=4).state_dict()
    with pytest.raises(ValueError, match="saved for another model"):
        diloco(layered(width=8), inner_steps=4).load_state_dict(state)


def test_qsr_period_rule_picks_each_rounds_h() -> None:
    """inner_steps="qsr": rounds end where QSR's rule (algorithms/qsr.py, the one qsr uses) puts them,
    with a scheduler stepped after opt.step()."""
    lr, steps, options = warmup_cosine(0.1, 0, 600), 600, {"h_base": 4, "alpha": 0.35, "h_min": 2, "total_steps": 600}
    want = reference_round_ends(lr, steps, 4, 0.35, 2.0, 2, 0, 600)
    ends, periods = pycomm_round_ends(lr, steps, algorithm="diloco", inner_steps="qsr", **options)
    assert all(t + h in want or t + h > steps for t, h in periods)  # current_period between rounds: the next H
    assert len(want) > 10 and ends == want


def test_average_now_applies_the_rounds_in_flight_and_leaves_the_outer_state() -> None:
    model = layered()
    opt = diloco(model, inner_steps=4, fragments=2, sync_delay=1, mixing=0.5)
    train(model, opt, 6)
    assert opt.in_flight == {1: 7} and opt.rounds == 2
    outer = [x.clone() for x in opt.global_params]
    opt.average_now()  # one rank: the mean is this rank's model
    assert opt.in_flight == {} and opt.rounds == 3
    moved = {i for i, (a, b) in enumerate(zip(outer, opt.global_params)) if not torch.equal(a, b)}
    assert moved == set(opt.fragments[1])  # the round in flight's outer step, nothing else


def test_bf16_parameters_keep_an_fp32_global_copy() -> None:
    model = layered().to(torch.bfloat16)
    opt = diloco(model, inner_steps=3, codec="int8")
    train(model, opt, 7)
    assert all(x.dtype == torch.float32 for x in opt.global_params)
    assert all(p.dtype == torch.bfloat16 and torch.isfinite(p).all() for p in model.parameters())
    assert opt.rounds == 2
