"""examples/zero3_gpt.py on 2 real ranks under mpirun: the loss decreases, and a run resumed from the
checkpoint it wrote halfway continues bit for bit (the same losses, and at the end the same shards:
masters, AdamW state, step) as the run that went on without stopping."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import pseudo_text
from tests.examples import run_example

STEPS, HALF = 16, 8


def assert_identical(a: Any, b: Any, where: str = "") -> None:
    if torch.is_tensor(a):
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_identical(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.mpi
def test_loss_decreases_and_a_resume_continues_bit_exactly(tmp_path: Path) -> None:
    data = str(pseudo_text.write(tmp_path / "text.txt", words=8))  # learnt in a few steps; no tiny Shakespeare in CI
    args = ["--data", data, "--steps", str(STEPS), "--save-every", str(HALF), "--log-every", "1"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    out = run_example.run("zero3_gpt.py", *args, "--checkpoint-dir", str(straight)).stdout
    losses = run_example.numbers(r"step \d+: loss ([\d.]+)", out)
    assert len(losses) == STEPS and sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.3, out
    assert sorted(p.name for p in straight.iterdir()) == [f"step{HALF:06d}", f"step{STEPS:06d}"]

    # a second run finds only the halfway checkpoint (as if the first had been killed after it)
    resumed.mkdir()
    shutil.copytree(straight / f"step{HALF:06d}", resumed / f"step{HALF:06d}")
    again = run_example.run("zero3_gpt.py", *args, "--checkpoint-dir", str(resumed)).stdout
    assert f"at step {HALF}" in again, again
    assert re.findall(r"step \d+: loss .*", again) == re.findall(r"step \d+: loss .*", out)[HALF:], again
    files = sorted(p.name for p in (straight / f"step{STEPS:06d}").glob("*.pt"))
    assert len(files) == 2, files  # one shard per rank
    for name in files:
        assert_identical(
            torch.load(straight / f"step{STEPS:06d}" / name, weights_only=False),
            torch.load(resumed / f"step{STEPS:06d}" / name, weights_only=False),
            name,
        )
