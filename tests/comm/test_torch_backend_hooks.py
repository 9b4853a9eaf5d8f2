"""pycomm's codecs as DDP communication hooks (pycomm/ddp_hooks.py), on real ranks
(tests/comm/workers/torch_backend_hooks.py): DDP on the MNIST CNN with the int8 hook reaches fp32 DDP's
accuracy band in a short run, on backend "pycomm" (pycomm's allreduce_quantized: its all-to-alls counted)
and on a gloo group (all-gathered encodings); int4 and 1-bit with error feedback train too; the hook counts
the encoded against the fp32 bytes, and every rank ends with the same parameters; error feedback survives
DDP's re-bucketing after the first step."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
def test_quantized_hooks_train_like_fp32():
    proc = mpirun(
        2,
        "tests.comm.workers.torch_backend_hooks",
        env={"PYCOMM_TIMEOUT": "60", "PYTHONWARNINGS": "ignore::FutureWarning"},
        timeout=400,
    )
    assert sorted(re.findall(r"rank (\d): hooks passed", proc.stdout)) == ["0", "1"], proc.stdout


@pytest.mark.mpi
def test_error_feedback_follows_ddp_rebuilt_buckets():
    # DDP re-buckets after the first step: the 1-bit hook's residuals used to stay keyed by bucket index, and the
    # rebuilt first bucket met the old one's residual (pycomm: a ValueError naming the sizes)
    proc = mpirun(
        2,
        "tests.comm.workers.torch_backend_hooks",
        "rebuilt",
        env={"PYCOMM_TIMEOUT": "60", "PYTHONWARNINGS": "ignore::FutureWarning"},
        timeout=300,
    )
    for name in ("pycomm", "gloo"):
        assert sorted(re.findall(rf"rank (\d): rebuilt buckets {name}: 2 residuals", proc.stdout)) == ["0", "1"], (
            proc.stdout
        )
