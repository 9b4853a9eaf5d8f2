"""examples/fsdp2_on_pycomm.py on 2 real ranks under mpirun: the unmodified FSDP2 script reaches its stated
accuracy on backend "pycomm", every rank ends with the same full parameters, and they are bit for bit
those of the same script on torch's gloo (`--backend gloo`, as its opening lines show)."""

from __future__ import annotations

import re

import pytest

from tests.examples import run_example


def _fingerprints(out: str, backend: str) -> dict[str, str]:
    return dict(re.findall(rf"rank (\d): parameters ([0-9a-f]{{16}}) \({backend}\)", out))


@pytest.mark.mpi
def test_fsdp2_script_on_pycomm_learns_what_it_learns_on_gloo() -> None:
    assert "89%" in run_example.docstring("fsdp2_on_pycomm.py")
    out = run_example.run("fsdp2_on_pycomm.py").stdout
    accuracy = run_example.numbers(r"epoch 0: eval accuracy ([\d.]+)", out)
    assert len(accuracy) == 1 and accuracy[0] >= 0.86, out
    on_pycomm = _fingerprints(out, "pycomm")
    assert set(on_pycomm) == {"0", "1"} and len(set(on_pycomm.values())) == 1, out
    on_gloo = _fingerprints(run_example.run("fsdp2_on_pycomm.py", "--backend", "gloo").stdout, "gloo")
    assert on_gloo == on_pycomm
