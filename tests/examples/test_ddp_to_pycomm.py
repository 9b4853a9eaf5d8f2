"""examples/ddp_to_pycomm.py on 2 real ranks under mpirun reaches its stated accuracy with identical
parameters on both ranks, and docs/port_ddp.md's diff is exactly the change from a plain single-process
script (which runs) to the example."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from apps.data import idx
from tests.examples import run_example
from tests.launch import ROOT

DOC = ROOT / "docs" / "port_ddp.md"


def fingerprint(state: dict[str, torch.Tensor]) -> str:
    """The example's fingerprint (sha256 of the parameters' bytes in order), computed here independently."""
    return hashlib.sha256(b"".join(t.numpy().tobytes() for t in state.values())).hexdigest()[:16]


def sides_of_the_diff() -> tuple[str, str]:
    """(plain script, distributed script) from the whole-file diff in docs/port_ddp.md."""
    block = re.search(
        r"```diff\n--- mnist\.py\n\+\+\+ examples/ddp_to_pycomm\.py\n@@ [^\n]*\n(.*?)```", DOC.read_text(), re.S
    )
    assert block, "docs/port_ddp.md has no whole-file diff from mnist.py to examples/ddp_to_pycomm.py"
    before, after = [], []
    for line in block.group(1).splitlines():
        mark, text = (line[:1], line[1:]) if line else (" ", "")  # an editor may strip a blank line's space
        assert mark in " -+", f"not a diff line: {line!r}"
        if mark in " -":
            before.append(text)
        if mark in " +":
            after.append(text)
    return "\n".join(before) + "\n", "\n".join(after) + "\n"


@pytest.mark.mpi
def test_two_ranks_reach_the_stated_accuracy_with_identical_parameters(tmp_path: Path) -> None:
    saved = tmp_path / "mnist_mlp.pt"
    out = run_example.run("ddp_to_pycomm.py", "--save", str(saved)).stdout
    assert "93%" in run_example.docstring("ddp_to_pycomm.py")  # what the docstring promises ...
    accuracy = run_example.numbers(r"epoch 1: eval accuracy ([\d.]+)", out)
    assert len(accuracy) == 1 and accuracy[0] >= 0.90, out  # ... within a margin
    printed = dict(re.findall(r"rank (\d): parameters ([0-9a-f]{16})", out))
    assert set(printed) == {"0", "1"} and printed["0"] == printed["1"], out  # the ranks end identical
    state = torch.load(saved, weights_only=True)
    assert fingerprint(state) == printed["0"]  # what rank 0 saved is that model
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )
    model.load_state_dict(state)
    x, y = idx.load().eval.batch(torch.arange(2000))
    with torch.no_grad():
        assert (model(x).argmax(1) == y).float().mean().item() == pytest.approx(accuracy[0], abs=1e-4)


def test_the_diff_in_the_guide_is_the_example_and_its_plain_side_runs(tmp_path: Path) -> None:
    plain, distributed = sides_of_the_diff()
    source = (ROOT / "examples" / "ddp_to_pycomm.py").read_text()
    code = source[source.index('"""', 3) + 4 :]  # below the opening docstring
    assert distributed == code, "docs/port_ddp.md's diff is not examples/ddp_to_pycomm.py's code: regenerate it"
    assert not re.search(r"^(import|from) (pycomm|algorithms)\b|comm\.", plain, re.M), plain  # plain torch
    # the plain script on one process, one epoch, run as if it were the file in examples/ (its sys.path line
    # finds the checkout from there)
    script = ROOT / "examples" / "ddp_to_pycomm.py"
    run = (
        f"import sys; sys.argv = ['{script}', '--epochs', '1', '--save', {str(tmp_path / 'plain.pt')!r}]\n"
        f"__file__ = {str(script)!r}\nexec(compile({plain!r}, {str(script)!r}, 'exec'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", run],
        cwd=tmp_path,
        env=run_example.user_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert run_example.numbers(r"epoch 0: eval accuracy ([\d.]+)", proc.stdout)[0] >= 0.85, proc.stdout
    assert re.search(r"^parameters [0-9a-f]{16}$", proc.stdout, re.M), proc.stdout
