"""Point-to-point for pipelines and servers: send_tensor / recv_tensor of unknown shape and dtype,
receive from ANY_SOURCE, probe, tags at the transport's bound, and Communicator.dup(). Multi-rank
cases run real ranks (tests/comm/workers/p2p_messages.py on 3, p2p_dup.py on 2); the local
transport's (one rank) are checked in this process."""

from __future__ import annotations

import re

import pytest
import torch

import pycomm
from pycomm._build import core
from pycomm.communicator import Communicator
from tests.launch import mpirun, torchrun


def local() -> Communicator:
    return Communicator(core().local_transport(), "local")


@pytest.mark.mpi
@pytest.mark.parametrize("inline_bytes", ["0", "1048576"], ids=["queued", "caller-thread"])
def test_messages_of_unknown_shape_and_source_under_3_ranks(inline_bytes):
    proc = mpirun(
        3,
        "tests.comm.workers.p2p_messages",
        env={"PYCOMM_INLINE_BYTES": inline_bytes, "PYCOMM_TIMEOUT": "60"},
        timeout=300,
    )
    passed = re.findall(r"rank (\d+): (\d+) p2p checks passed", proc.stdout)
    assert sorted(int(r) for r, n in passed if n == "6") == [0, 1, 2], proc.stdout


@pytest.mark.mpi
def test_dup_is_independent_under_2_ranks():
    proc = mpirun(2, "tests.comm.workers.p2p_dup", env={"PYCOMM_TIMEOUT": "60"}, timeout=300)
    assert sorted(re.findall(r"rank (\d+): dup checks passed", proc.stdout)) == ["0", "1"], proc.stdout


def test_messages_of_unknown_shape_and_source_on_gloo_under_torchrun():
    """The same worker on the gloo transport (torchrun: no MPI); probe is refused there, naming gloo."""
    proc = torchrun(3, "tests.comm.workers.p2p_messages", env={"PYCOMM_TIMEOUT": "60"}, timeout=300)
    passed = re.findall(r"rank (\d+): (\d+) p2p checks passed", proc.stdout)
    assert sorted(int(r) for r, n in passed if n == "6") == [0, 1, 2], proc.stdout


def test_dup_is_independent_on_gloo_under_torchrun():
    proc = torchrun(2, "tests.comm.workers.p2p_dup", env={"PYCOMM_TIMEOUT": "60"}, timeout=300)
    assert sorted(re.findall(r"rank (\d+): dup checks passed", proc.stdout)) == ["0", "1"], proc.stdout


def test_local_send_tensor_recv_tensor_keeps_shape_and_dtype():
    c = local()
    cases = [
        torch.tensor(3.5, dtype=torch.float64),
        torch.zeros((0, 4), dtype=torch.int32),
        torch.arange(16, dtype=torch.bfloat16).reshape([1, 2] * 4),
        torch.arange(24).reshape(2, 3, 4)[:, ::2],
    ]
    for i, t in enumerate(cases):
        c.send_tensor(t, 0, tag=i)
    for i, t in enumerate(cases):
        got = c.recv_tensor(pycomm.ANY_SOURCE, tag=i)
        assert (got.source, got.tag) == (0, i)
        assert got.tensor.dtype == t.dtype and got.tensor.shape == t.shape and torch.equal(got.tensor, t)
    c.send(torch.ones(5), 0, tag=9)  # a plain send arrives 1-d
    assert c.recv_tensor(0, tag=9).tensor.shape == (5,)


def test_local_probe_any_source_and_work_source():
    c = local()
    w = c.irecv_tensor(tag=3)
    assert not w.is_completed() and c.probe(tag=3, block=False) is None
    c.isend_tensor(torch.ones(2, 3, dtype=torch.int8), 0, tag=3).wait()
    got = w.wait()
    assert got.source == 0 and got.tensor.tolist() == [[1] * 3] * 2
    c.send_tensor(torch.zeros(4, 1), 0, tag=4)
    assert c.probe() == pycomm.Message(0, 4, (4, 1), torch.float32)
    assert c.probe(0, 4, block=False) == pycomm.Message(0, 4, (4, 1), torch.float32)  # not consumed
    buf = torch.ones(4, 1)
    assert c.recv(buf, pycomm.ANY_SOURCE, tag=4) == 0 and not buf.any()
    c.send(torch.ones(2), 0, tag=5)
    w = c.irecv(torch.zeros(2), pycomm.ANY_SOURCE, tag=5)
    w.wait()
    assert w.source == 0
    with pytest.raises(pycomm.PycommError, match="not a completed receive"):
        _ = c.isend(torch.ones(1), 0).source


def test_local_tag_bound_is_the_transports():
    c = local()
    assert c.max_tag == 2**31 - 1
    c.send_tensor(torch.ones(1), 0, tag=c.max_tag)
    assert c.recv_tensor(0, tag=c.max_tag).tag == c.max_tag
    with pytest.raises(ValueError, match=rf"tag must be an int in \[0, {c.max_tag}\]"):
        c.send_tensor(torch.ones(1), 0, tag=c.max_tag + 1)


def test_local_recv_into_a_wrong_buffer_is_a_mismatch():
    c = local()
    c.send_tensor(torch.ones(3, dtype=torch.int32), 0)
    with pytest.raises(pycomm.MismatchError, match="int32"):
        c.recv(torch.zeros(3), 0)


def test_local_dup_has_its_own_queue():
    c = local()
    d = c.dup()
    assert d.name == "local.dup()" and d.size == 1
    w = c.irecv_tensor(0, tag=1)  # pending on c
    d.send_tensor(torch.tensor([2]), 0, tag=1)  # the same tag on d: never c's message
    assert d.recv_tensor(0, tag=1).tensor.tolist() == [2] and not w.is_completed()
    c.send_tensor(torch.tensor([1]), 0, tag=1)
    assert w.wait().tensor.tolist() == [1]
