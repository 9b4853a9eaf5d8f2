"""Every accessor of a Work answers at any time: while its op is pending, after wait() or synchronize(),
and after its communicator was shut down and dropped; `info` names the op exactly (OpInfo::describe, the
text of every stall and mismatch error). The pattern tests/comm/test_nccl.py runs on a GPU (many async ops,
the last synchronized, then their info), here on the local transport, whose Work is the host queue's (as
MPI's)."""

from __future__ import annotations

import gc

import torch

import pycomm
from pycomm._build import core
from pycomm.communicator import Communicator


def local() -> Communicator:
    return Communicator(core().local_transport(), "local")


def test_async_works_answer_after_completion_in_order_and_name_their_op() -> None:
    c = local()
    tensors = [torch.full((1 << 16,), float(i)) for i in range(20)]
    works = [c.allreduce(t, op=pycomm.MAX, async_op=True) for t in tensors]
    for w in works:
        w.wait()
    works[-1].synchronize()
    assert all(w.is_completed() for w in works)
    infos = [w.info for w in works]
    assert [i["seq"] for i in infos] == sorted({i["seq"] for i in infos}), infos  # submission order, no repeats
    first = infos[0]
    assert (first["name"], first["count"], first["dtype"], first["bytes"]) == ("allreduce", 1 << 16, "float32", 1 << 18)
    assert first["describe"] == f"allreduce #{first['seq']} (count 65536, float32, 262144 bytes, op MAX)"
    assert repr(works[0]) == f"<pycomm.Work {first['describe']} completed>"


def test_every_field_of_the_description_and_a_pending_receive() -> None:
    c = local()
    got = torch.zeros(3, dtype=torch.int64)
    recv = c.irecv(got, 0, tag=5)  # pending until its send: every accessor answers meanwhile
    assert not recv.is_completed()
    seq = recv.info["seq"]
    assert recv.info["describe"] == f"recv #{seq} (count 3, int64, 24 bytes, peer 0, tag 5)"
    assert repr(recv).endswith("pending>")
    c.isend(torch.tensor([1, 2, 3]), 0, tag=5).wait()
    recv.synchronize()
    assert got.tolist() == [1, 2, 3] and recv.source == 0
    bcast = c.broadcast(torch.zeros(2, dtype=torch.float64), root=0, async_op=True)
    bucket = c.allreduce(torch.zeros(4, dtype=torch.bfloat16), op=pycomm.AVG, async_op=True, bucket=7)
    bcast.wait()
    bucket.wait()
    assert bcast.info["describe"] == f"broadcast #{seq + 2} (count 2, float64, 16 bytes, root 0)"
    assert bucket.info["describe"] == f"allreduce #{seq + 3} (count 4, bfloat16, 8 bytes, op AVG, bucket 7)"
    assert bucket.info["bucket"] == 7 and bcast.info["peer"] == 0


def test_works_outlive_their_communicator() -> None:
    c = local()
    works = [c.allreduce(torch.ones(8), op=pycomm.SUM, async_op=True) for _ in range(4)]
    recv = c.irecv(torch.zeros(1), 0, tag=1)
    c.isend(torch.ones(1), 0, tag=1)
    c.shutdown()  # completes what was submitted
    del c
    gc.collect()
    for w in works:
        w.wait()
        assert w.is_completed() and w.info["name"] == "allreduce" and "completed" in repr(w)
    assert recv.info["describe"].startswith("recv #") and recv.is_completed() and recv.source == 0
