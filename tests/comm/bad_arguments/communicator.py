"""Bad-argument cases of Communicator's ops and of LayerwiseAverager, on a one-rank communicator."""

from __future__ import annotations

from typing import Iterator

import torch

import pycomm
from pycomm._build import core
from pycomm.communicator import Communicator
from tests.comm.bad_arguments.cases import (
    BAD_BOOL,
    BAD_CODEC,
    BAD_INT_POSITIVE,
    BAD_OP,
    BAD_TENSORS,
    Case,
    N,
    f32,
    input_tensor,
    tensor_arg,
    vary,
    without,
)


def local_comm() -> Communicator:
    return Communicator(core().local_transport(), "local")


def averager_cases() -> Iterator[Case]:
    yield from vary(
        "LayerwiseAverager",
        pycomm.LayerwiseAverager,
        lambda: dict(params_by_layer=[f32(4)], comm=local_comm(), codec=None),
        dict(
            params_by_layer=[
                ("str", "x"),
                ("None", None),
                ("empty", []),
                ("list of floats", [[1.0]]),
                ("int tensor", [torch.zeros(4, dtype=torch.int32)]),
                ("list of str", ["x"]),
            ],
            comm=[("str", "x"), ("int", 5)],
            codec=BAD_CODEC,
        ),
    )
    averager = pycomm.LayerwiseAverager([f32(4)], comm=local_comm())
    yield Case(
        "LayerwiseAverager.wait", "layer", "unknown layer", lambda: averager.wait(layer=7), errors=(KeyError,)
    )  # a lookup by key, documented as KeyError


def communicator_cases() -> Iterator[Case]:
    c = local_comm()
    # collectives move any dtype: a tensor is bad for its type or layout, not its dtype
    tensor = without(input_tensor(4), "wrong dtype")
    yield from vary(
        "Communicator.allreduce",
        c.allreduce,
        lambda: dict(tensor=f32(4), op=pycomm.SUM, async_op=False, bucket=-1),
        dict(tensor=tensor, op=BAD_OP, async_op=BAD_BOOL, bucket=[("str", "x"), ("float", 1.5), ("huge", 2**62)]),
    )
    yield from vary(
        "Communicator.broadcast",
        c.broadcast,
        lambda: dict(tensor=f32(4), root=0, async_op=False),
        dict(
            tensor=tensor,
            root=[("str", "0"), ("None", None), ("float", 0.0), ("negative", -1), ("size", 1)],
            async_op=BAD_BOOL,
        ),
    )
    for name in ("allgather", "alltoall", "reduce_scatter"):
        yield from vary(
            f"Communicator.{name}",
            getattr(c, name),
            lambda: dict(out=f32(4), tensor=f32(4)),
            dict(out=tensor_arg(4), tensor=input_tensor(4)),
        )
    yield from vary("Communicator.barrier", c.barrier, lambda: dict(async_op=False), dict(async_op=BAD_BOOL))
    bad_tag = [("str", "0"), ("negative", -1), ("huge", 2**62), ("past max_tag", c.max_tag + 1), ("float", 1.0)]
    bad_dst = [("str", "0"), ("None", None), ("ANY_SOURCE", pycomm.ANY_SOURCE), ("negative", -2), ("size", 1)]
    bad_src = [("str", "0"), ("None", None), ("negative", -2), ("size", 1)]  # -1 is ANY_SOURCE
    for name, peer in (("isend", "dst"), ("irecv", "src")):
        yield from vary(
            f"Communicator.{name}",
            getattr(c, name),
            lambda peer=peer: {"tensor": f32(4), peer: 0, "tag": 0},
            {"tensor": tensor, peer: bad_dst if peer == "dst" else bad_src, "tag": bad_tag},
        )
    yield from vary(
        "Communicator.isend_tensor",
        c.isend_tensor,
        lambda: dict(tensor=f32(4), dst=0, tag=0),
        dict(
            tensor=[
                ("str", "x"),
                ("None", None),
                ("list of floats", [1.0] * 4),
                ("9 dimensions", torch.zeros([1] * 9)),
                ("bool dtype", torch.zeros(2, dtype=torch.bool)),
            ],
            dst=bad_dst,
            tag=bad_tag,
        ),
    )
    yield from vary(
        "Communicator.irecv_tensor", c.irecv_tensor, lambda: dict(src=0, tag=0), dict(src=bad_src, tag=bad_tag)
    )
    yield from vary(
        "Communicator.probe",
        c.probe,
        lambda: dict(src=0, tag=0, block=False),
        dict(src=bad_src, tag=[("str", "0"), ("negative", -2), ("past max_tag", c.max_tag + 1)], block=BAD_BOOL),
    )
    yield from vary(
        "Communicator.split",
        c.split,
        lambda: dict(color=0, key=None),
        dict(
            color=[("str", "0"), ("None", None), ("float", 0.0), ("huge", 2**62)],
            key=[("str", "0"), ("float", 0.0), ("huge", 2**62)],
        ),
    )
    yield from vary(
        "Communicator.allreduce_coalesced",
        lambda **kw: c.allreduce_coalesced(**kw).wait(),
        lambda: dict(tensors=[f32(4)], op=pycomm.SUM, bucket_bytes=1 << 20, wire_dtype=None, async_op=True),
        dict(
            tensors=without(BAD_TENSORS, "int tensors"),
            op=BAD_OP,
            bucket_bytes=without(BAD_INT_POSITIVE, "huge", "None"),  # None: the default
            wire_dtype=[("str", "bf16"), ("int dtype", torch.int32)],
            async_op=BAD_BOOL,
        ),
    )
    yield from vary(
        "Communicator.allreduce_quantized",
        lambda **kw: c.allreduce_quantized(**kw).wait(),
        lambda: dict(tensor=f32(), op=pycomm.SUM, codec=None, error_feedback=None, async_op=True),
        dict(
            tensor=input_tensor(N),
            op=BAD_OP,
            codec=BAD_CODEC,
            error_feedback=[
                ("str", "x"),
                ("wrong size", torch.zeros(N + 1)),
                ("wrong dtype", torch.zeros(N, dtype=torch.float64)),
            ],
        ),
    )
