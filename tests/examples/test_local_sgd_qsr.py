"""examples/local_sgd_qsr.py on 2 real ranks under mpirun: the periods H it prints are QSR's (h_base
during the warm-up, then floor((alpha / lr) ** 2), growing as the cosine schedule decays the rate, the last
cut to end on the last step), each round ends H steps after the one before, and after the last round
the replicas hold the same parameters."""

from __future__ import annotations

import math
import re

import pytest

from tests.examples import run_example

STEPS, WARMUP, H_BASE, ALPHA = 200, 20, 2, 4e-3  # the example's defaults


@pytest.mark.mpi
def test_periods_grow_as_the_rate_decays_and_the_replicas_agree_after_the_last_round() -> None:
    out = run_example.run("local_sgd_qsr.py").stdout
    rounds = [
        (int(s), int(h), float(lr))
        for s, h, lr in re.findall(
            r"step (\d+): averaged after H = (\d+) local steps \(chosen at lr ([\d.e+-]+)\)", out
        )
    ]
    assert len(rounds) >= 10, out
    ends = [0] + [s for s, _, _ in rounds]
    assert [h for _, h, _ in rounds] == [b - a for a, b in zip(ends, ends[1:])], out  # H steps per round
    assert ends[-1] == STEPS, out  # the last round ends the run
    assert all(h == H_BASE for s, h, _ in rounds if s - h < WARMUP), out  # h_base while warming up
    after = [(s - h, h, lr) for s, h, lr in rounds if s - h >= WARMUP]  # (first step, H, rate) of each period
    *ruled, (start, last, last_lr) = after
    for (_, h1, lr1), (_, h2, lr2) in zip(ruled, ruled[1:]):
        assert lr2 <= lr1 and h2 >= h1, out  # a decaying rate, a growing H
    for _, h, lr in ruled:  # QSR's rule, from the 3-digit rate
        assert abs(h - max(H_BASE, math.floor((ALPHA / lr) ** 2))) <= 0.03 * h + 1, (h, lr)
    assert last == STEPS - start <= max(H_BASE, math.floor((ALPHA / last_lr) ** 2)) * 1.03 + 1, out  # cut at the end
    assert ruled[-1][1] > 2 * ruled[0][1], out  # it really grew
    printed = dict(re.findall(r"rank (\d): parameters ([0-9a-f]{16})", out))
    assert set(printed) == {"0", "1"} and printed["0"] == printed["1"], out
