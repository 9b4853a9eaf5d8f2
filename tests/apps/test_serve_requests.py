"""What a request can ask of apps.serve, without a server: sampling that never fails at the extremes
a checked request allows (and at broken logits), the nucleus cut, stop strings over a token stream,
the chat template, the bounded session memory and the field checks."""

from __future__ import annotations

import math

import pytest
import torch

from apps.serve import request_checks as checks
from apps.serve.chat_sessions import SessionStore
from apps.serve.chat_template import Message, render, turns
from apps.serve.http_errors import BadRequest
from apps.serve.sampling import GREEDY_BELOW, sample_one
from apps.serve.stop_strings import StopMatcher
from apps.serve.text_codec import Vocabulary


def draws(logits: list[float], temperature: float, top_k: int | None, top_p: float, n: int = 300) -> list[int]:
    g = torch.Generator().manual_seed(0)
    row = torch.tensor(logits, dtype=torch.float32)
    return [sample_one(row, temperature, top_k, top_p, g) for _ in range(n)]


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, GREEDY_BELOW, GREEDY_BELOW * 1.01, 1e-3, 1.0, 100.0])
@pytest.mark.parametrize(
    "logits",
    [
        [3e38, -3e38, 0.0, 1.0],
        [float("nan"), 2.0, float("inf"), 1.0],
        [float("nan")] * 4,
        [0.0, 0.0, 0.0, 0.0],
        [-1e30, -1e30 + 1e24, -2e30, -3e30],
    ],
)
def test_sampling_never_fails_and_stays_in_the_vocabulary(temperature: float, logits: list[float]) -> None:
    got = draws(logits, temperature, None, 1.0, n=20) + draws(logits, temperature, 2, 1e-300, n=20)
    assert all(0 <= t < len(logits) for t in got)
    finite = [(-math.inf if math.isnan(x) else x) for x in logits]
    if temperature <= 1e-3 and len(set(finite)) == len(finite):  # cold: the largest logit (inf counts as largest)
        assert set(got) == {finite.index(max(finite))}, got


def test_top_p_keeps_the_smallest_set_reaching_p_and_top_k_cuts_first() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).tolist()
    assert set(draws(logits, 1.0, None, 0.6)) == {0, 1}  # 0.5 < 0.6: the next one completes the nucleus
    assert set(draws(logits, 1.0, None, 0.5)) == {0}  # 0.5 reaches 0.5
    assert set(draws(logits, 1.0, None, 1.0)) == {0, 1, 2, 3}
    assert set(draws(logits, 1.0, 3, 0.9)) == {0, 1, 2}
    assert set(draws(logits, 1.0, 1, 1.0)) == {0}


def stream(stops: tuple[str, ...], pieces: list[str]) -> tuple[list[str], bool, str]:
    m = StopMatcher(stops)
    out = [m.feed(p) for p in pieces]
    return out, m.stopped, m.flush()


def test_stop_strings_are_cut_and_never_streamed() -> None:
    assert stream(("</s>",), ["ab", "c<", "/s", ">x", "y"]) == (["ab", "c", "", "", ""], True, "")
    assert stream(("</s>",), ["a<", "/b", "c"]) == (["a", "</b", "c"], False, "")  # a near miss is released
    assert stream(("\n\n", "END"), ["x\n", "E", "ND\n\nmore"]) == (["x", "\n", ""], True, "")  # the earliest wins
    assert stream(("zz",), ["az"]) == (["a"], False, "z")  # held at the end, released by flush
    assert stream((), ["anything"]) == (["anything"], False, "")


def test_chat_template_is_plain_text_in_shakespeare_layout() -> None:
    msgs = [
        Message(role="system", content="Be brief."),
        Message(role="user", content=[{"type": "text", "text": "Who"}, {"type": "text", "text": "?"}]),
    ]
    assert render(turns(msgs)) == "SYSTEM:\nBe brief.\n\nUSER:\nWho?\n\nASSISTANT:\n"
    with pytest.raises(BadRequest, match=r"messages\.0\.role: must be one of"):
        turns([Message(role="wizard", content="x")])
    with pytest.raises(BadRequest, match="at least one message"):
        turns([])


def test_session_memory_is_bounded_and_kept_per_owner() -> None:
    store = SessionStore(max_sessions=2, max_turns=3)
    store.add("me", "a", [("user", "1"), ("assistant", "2")])
    store.add("me", "a", [("user", "3"), ("assistant", "4")])
    assert store.history("me", "a") == [("assistant", "2"), ("user", "3"), ("assistant", "4")]  # the last 3 turns
    assert store.history("me", "a", limit=1) == [("assistant", "4")]
    # the same session_id under another owner (or none) is another, empty session; clearing it clears nothing
    assert store.history("you", "a") == [] and store.history(None, "a") == [] and store.clear("you", ["a"]) == 0
    store.add("me", "b", [("user", "x")])
    store.history("me", "a")  # a is now the most recently used
    store.add("me", "c", [("user", "y")])  # a third session: b, the least recently used, is forgotten
    assert store.history("me", "b") == [] and store.count() == 2
    assert store.clear("me", ["a", "nope"]) == 3 and store.history("me", "a") == []


def test_n_samples_are_bounded_and_their_seeds_stay_64_bit() -> None:
    assert checks.samples(None) == 1 and checks.samples(checks.MAX_N) == checks.MAX_N
    for bad in (0, -1, checks.MAX_N + 1):
        with pytest.raises(BadRequest, match=f"^n: must be between 1 and {checks.MAX_N}"):
            checks.samples(bad)
    assert checks.nth_seed(5, 2) == 7 and checks.nth_seed(2**63 - 1, 1) == -(2**63)


def test_field_checks_name_the_field_before_the_wire() -> None:
    limits = checks.Limits(Vocabulary("abc"), block_size=8, max_tokens=100)
    assert checks.top_k(2**63, limits) is None and checks.top_k(2, limits) == 2  # >= vocabulary: no limit
    assert checks.max_tokens(None, 200, limits) == 100 and checks.max_tokens(50, 200, limits) == 50
    assert checks.seed(-(2**63)) == -(2**63) and checks.stops(["", "x"]) == ("x",)
    for call, field in [
        (lambda: checks.top_k(0, limits), "top_k"),
        (lambda: checks.seed(2**63), "seed"),
        (lambda: checks.temperature(-1e-300, 1.0), "temperature"),
        (lambda: checks.temperature(1e300, 1.0), "temperature"),
        (lambda: checks.top_p(0.0), "top_p"),
        (lambda: checks.top_p(1.5), "top_p"),
        (lambda: checks.max_tokens(101, 1, limits), "max_tokens"),
        (lambda: checks.stops(["a"] * 5), "stop"),
        (lambda: checks.prompt_ids(limits, "abd", "text"), "text"),
        (lambda: checks.prompt_ids(limits, "", "prompt"), "prompt"),
    ]:
        with pytest.raises(BadRequest) as e:
            call()
        assert e.value.field == field and str(e.value).startswith(field), e.value
