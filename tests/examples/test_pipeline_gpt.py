"""examples/pipeline_gpt.py on 2 real ranks under mpirun (pp=2: one stage each, ZeRO-2 on each stage):
the loss, which comes back on every rank, decreases, and each stage held its half of the layers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import pseudo_text
from tests.examples import run_example


@pytest.mark.mpi
def test_two_stages_train_and_the_loss_decreases(tmp_path: Path) -> None:
    data = str(pseudo_text.write(tmp_path / "text.txt", words=8))  # learnt in a few steps; no tiny Shakespeare in CI
    out = run_example.run("pipeline_gpt.py", "--data", data, "--steps", "16", "--log-every", "1").stdout
    losses = run_example.numbers(r"step \d+: loss ([\d.]+)", out)
    assert len(losses) == 16 and sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.3, out
    # the embedding and the first two of four blocks on stage 0; bytes went to stage 1
    assert "stage 0 of 2 held layers ['0', '1', '2']" in out, out
    assert run_example.numbers(r"; (\d+) bytes sent to the next stage", out)[0] > 0, out
