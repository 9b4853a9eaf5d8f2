"""Generated bad-argument cases for pycomm's public API (tests/comm/test_bad_arguments.py).

Each public callable is described once: its good arguments, and for each argument the kind of value
it takes. Every case replaces one argument of a good call by one bad value of that kind (wrong type,
out of range, non-finite, tensor of the wrong dtype, size or layout). A case is *clear* when the call
raises TypeError or ValueError whose message names the argument, *unclear* when it raises anything
else (or does not name it), *silent* when it returns.

`python3 -m tests.comm.bad_arguments` prints the counts and every case that is not clear."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

import pycomm
from pycomm import kernels
from pycomm._build import core
from pycomm.communicator import Communicator

N, BLOCK = 300, 256  # tensor size and codec block of the good calls: two blocks, the last short
HOST = "127.0.0.1"


def f32(n: int = N) -> torch.Tensor:
    return torch.randn(n)


# ---- bad values of each kind of argument: (label, factory) ------------------------------------
def _tensor_bad(n: int, dtype: torch.dtype) -> list[tuple[str, Callable[[], Any]]]:
    wrong = torch.int32 if dtype != torch.int32 else torch.float32
    return [
        ("str", lambda: "x"),
        ("None", lambda: None),
        ("list of floats", lambda: [1.0] * n),
        ("wrong dtype", lambda: torch.zeros(n, dtype=wrong)),
        ("non-contiguous", lambda: torch.zeros(2 * n, dtype=dtype)[::2]),
        ("wrong size", lambda: torch.zeros(n + 1, dtype=dtype)),
    ]


BAD_INT_POSITIVE = [
    ("str", "8"),
    ("None", None),
    ("float", 8.0),
    ("bool", True),
    ("negative", -1),
    ("zero", 0),
    ("huge", 2**62),
    ("nan", math.nan),
]
BAD_INT_NONNEGATIVE = [("str", "8"), ("None", None), ("float", 1.5), ("bool", True), ("negative", -5), ("huge", 2**64)]
BAD_FLOAT = [("str", "x"), ("None", None), ("nan", math.nan), ("inf", math.inf), ("list", [1.0])]
BAD_BOOL = [("str", "no"), ("None", None), ("int 2", 2), ("float", 0.5)]
BAD_TIMEOUT = [("str", "1"), ("negative", -1), ("nan", math.nan), ("list", [1])]  # 0 polls, inf waits forever
BAD_TENSORS = [
    ("str", "x"),
    ("None", None),
    ("single tensor", torch.zeros(4)),
    ("list of floats", [1.0, 2.0]),
    ("list with None", [None]),
    ("int tensors", [torch.zeros(4, dtype=torch.int32)]),
    ("non-contiguous", [torch.zeros(8)[::2]]),
]
BAD_OFFSETS = [
    ("float offset", [1.5]),
    ("str offset", ["0"]),
    ("negative offset", [-1]),
    ("huge offset", [2**62]),
    ("not a sequence", 5),
    ("too many", [0, 0]),
    ("bool offset", [True]),
]
BAD_KEY = [("int", 5), ("None", None), ("bytes", b"k"), ("list", ["k"])]
BAD_VALUE = [("int", 5), ("None", None), ("float", 1.5), ("list of ints", [1, 2])]
BAD_INT64 = [("str", "1"), ("None", None), ("float", 1.5), ("bool", True), ("2**63", 2**63), ("-2**63-1", -(2**63) - 1)]
BAD_OP = [("str", "sum"), ("None", None), ("out of range", 7), ("float", 1.0)]
BAD_CODEC = [("unknown name", "int9"), ("int", 5), ("class", pycomm.Int8Codec)]


@dataclass
class Case:
    api: str  # e.g. "kernels.pack"
    arg: str  # the argument replaced (and the name its error must carry)
    label: str  # what the bad value is
    call: Callable[[], Any]  # runs the call with the bad value
    errors: tuple[type[BaseException], ...] = (TypeError, ValueError)  # what counts as a clear error

    @property
    def name(self) -> str:
        return f"{self.api}({self.arg}={self.label})"


def _vary(
    api: str, fn: Callable[..., Any], good: Callable[[], dict[str, Any]], bad: dict[str, list[tuple[str, Any]]]
) -> Iterator[Case]:
    """One case per (argument, bad value): fn(**good() with that argument replaced)."""
    for arg, values in bad.items():
        for label, value in values:

            def call(arg=arg, value=value):
                kwargs = good()
                kwargs[arg] = value() if callable(value) and not isinstance(value, type) else value
                return fn(**kwargs)

            yield Case(api, arg, label, call)


def without(values: list[tuple[str, Any]], *labels: str) -> list[tuple[str, Any]]:
    """`values` less those that are fine for this argument."""
    return [v for v in values if v[0] not in labels]


def _tensor_arg(n: int, dtype: torch.dtype = torch.float32, optional: bool = False) -> list[tuple[str, Any]]:
    return without(_tensor_bad(n, dtype), "None") if optional else _tensor_bad(n, dtype)


def _input_tensor(n: int) -> list[tuple[str, Any]]:
    """Bad values of a tensor whose size sets the others' (any size of it is fine)."""
    return without(_tensor_bad(n, torch.float32), "wrong size")


# ---- the catalog ------------------------------------------------------------------------------
def kernel_cases() -> Iterator[Case]:
    yield from _vary(
        "kernels.num_blocks",
        kernels.num_blocks,
        lambda: dict(numel=N, block=BLOCK),
        dict(numel=BAD_INT_NONNEGATIVE, block=BAD_INT_POSITIVE),
    )
    yield from _vary("kernels.sign_bytes", kernels.sign_bytes, lambda: dict(numel=N), dict(numel=BAD_INT_NONNEGATIVE))
    yield from _vary(
        "kernels.bucket_offsets",
        kernels.bucket_offsets,
        lambda: dict(tensors=[f32(4)], align=1),
        dict(tensors=without(BAD_TENSORS, "int tensors", "non-contiguous"), align=without(BAD_INT_POSITIVE, "huge")),
    )
    multi = dict(tensors=BAD_TENSORS, offsets=BAD_OFFSETS)
    yield from _vary(
        "kernels.pack",
        kernels.pack,
        lambda: dict(tensors=[f32(4)], bucket=f32(8), offsets=None, scale=1.0),
        dict(multi, bucket=_input_tensor(8), scale=BAD_FLOAT),
    )
    yield from _vary(
        "kernels.unpack",
        kernels.unpack,
        lambda: dict(bucket=f32(8), tensors=[f32(4)], offsets=None, scale=1.0),
        dict(multi, bucket=_input_tensor(8), scale=BAD_FLOAT),
    )
    yield from _vary(
        "kernels.averaging_apply",
        kernels.averaging_apply,
        lambda: dict(tensors=[f32(4)], avg=f32(4), snapshot=f32(4), offsets=None),
        dict(multi, avg=_input_tensor(4), snapshot=_tensor_arg(4)),
    )
    yield from _vary(
        "kernels.elastic_update",
        kernels.elastic_update,
        lambda: dict(tensors=[f32(4)], centre=f32(4), a=0.5, offsets=None),
        dict(multi, centre=_input_tensor(4), a=BAD_FLOAT),
    )
    yield from _vary(
        "kernels.bucket_lerp",
        kernels.bucket_lerp,
        lambda: dict(tensors=[f32(4)], y=f32(4), z=f32(4), a=0.5, offsets=None),
        dict(multi, y=_input_tensor(4), z=_tensor_arg(4), a=BAD_FLOAT),
    )
    yield from _vary(
        "kernels.bucket_update",
        kernels.bucket_update,
        lambda: dict(tensors=[f32(4)], y=f32(4), alpha=1.0, beta=1.0, z=None, gamma=0.0, offsets=None),
        dict(
            multi, y=_input_tensor(4), z=_tensor_arg(4, optional=True), alpha=BAD_FLOAT, beta=BAD_FLOAT, gamma=BAD_FLOAT
        ),
    )
    yield from _vary(
        "kernels.quantize_int8",
        kernels.quantize_int8,
        lambda: dict(x=f32(), q=None, scales=None, block=BLOCK, stochastic=False, seed=0, residual=None),
        dict(
            x=_input_tensor(N),
            q=_tensor_arg(N, torch.int8, optional=True),
            scales=_tensor_arg(2, optional=True),
            block=BAD_INT_POSITIVE,
            stochastic=BAD_BOOL,
            seed=BAD_INT_NONNEGATIVE,
            residual=_tensor_arg(N, optional=True),
        ),
    )
    yield from _vary(
        "kernels.quantize_int4",
        kernels.quantize_int4,
        lambda: dict(x=f32(), packed=None, scales=None, block=BLOCK, stochastic=False, seed=0, residual=None),
        dict(
            x=_input_tensor(N),
            packed=_tensor_arg(N // 2, torch.uint8, optional=True),
            scales=_tensor_arg(2, optional=True),
            block=BAD_INT_POSITIVE + [("odd", 255)],
            stochastic=BAD_BOOL,
            seed=BAD_INT_NONNEGATIVE,
            residual=_tensor_arg(N, optional=True),
        ),
    )
    yield from _vary(
        "kernels.sign_compress",
        kernels.sign_compress,
        lambda: dict(x=f32(), bits=None, scales=None, block=BLOCK, residual=None),
        dict(
            x=_input_tensor(N),
            bits=_tensor_arg(38, torch.uint8, optional=True),
            scales=_tensor_arg(2, optional=True),
            block=BAD_INT_POSITIVE,
            residual=_tensor_arg(N, optional=True),
        ),
    )
    for name, data, dtype, out, n_data in (
        ("dequantize_int8", "q", torch.int8, "out", N),
        ("dequantize_int8_accumulate", "q", torch.int8, "acc", N),
        ("dequantize_int4", "packed", torch.uint8, "out", N // 2),
        ("dequantize_int4_accumulate", "packed", torch.uint8, "acc", N // 2),
        ("sign_decompress", "bits", torch.uint8, "out", 38),
        ("sign_decompress_accumulate", "bits", torch.uint8, "acc", 38),
    ):
        yield from _vary(
            f"kernels.{name}",
            getattr(kernels, name),
            lambda n_data=n_data, data=data, dtype=dtype, out=out: {
                data: torch.zeros(n_data, dtype=dtype),
                "scales": f32(2),
                out: f32(),
                "block": BLOCK,
            },
            {
                data: _tensor_arg(n_data, dtype),
                "scales": _tensor_arg(2),
                out: _input_tensor(N),
                "block": BAD_INT_POSITIVE,
            },
        )


def codec_cases() -> Iterator[Case]:
    yield from _vary(
        "Int8Codec",
        pycomm.Int8Codec,
        lambda: dict(block=BLOCK, stochastic=False, seed=0),
        dict(block=BAD_INT_POSITIVE, stochastic=BAD_BOOL, seed=BAD_INT_NONNEGATIVE),
    )
    yield from _vary(
        "Int4Codec",
        pycomm.Int4Codec,
        lambda: dict(block=BLOCK, stochastic=False, seed=0),
        dict(block=BAD_INT_POSITIVE + [("odd", 255)], stochastic=BAD_BOOL, seed=BAD_INT_NONNEGATIVE),
    )
    yield from _vary(
        "OneBitCodec",
        pycomm.OneBitCodec,
        lambda: dict(block=BLOCK),
        dict(block=BAD_INT_POSITIVE + [("not a multiple of 8", 12)]),
    )
    for codec in (pycomm.Int8Codec(block=BLOCK), pycomm.Int4Codec(block=BLOCK), pycomm.OneBitCodec(block=BLOCK)):
        cls = type(codec).__name__

        def enc(codec=codec):
            return codec.encode(f32())

        yield from _vary(
            f"{cls}.encode",
            codec.encode,
            lambda: dict(x=f32(), residual=None, out=None),
            dict(
                x=_input_tensor(N),
                residual=_tensor_arg(N, optional=True),
                out=[("str", "x"), ("tensor", f32()), ("other size", codec.empty(N + 1))],
            ),
        )
        for method, out in (("decode", "out"), ("decode_accumulate", "acc")):
            yield from _vary(
                f"{cls}.{method}",
                getattr(codec, method),
                lambda enc=enc, out=out: {"enc": enc(), out: f32()},
                {"enc": [("str", "x"), ("None", None), ("tensor", f32())], out: _input_tensor(N)},
            )
        for method in ("wire_bytes", "data_numel"):
            yield from _vary(
                f"{cls}.{method}", getattr(codec, method), lambda: dict(numel=N), dict(numel=BAD_INT_NONNEGATIVE)
            )
        yield from _vary(
            f"{cls}.empty",
            codec.empty,
            lambda: dict(numel=N, device="cpu"),
            dict(numel=BAD_INT_NONNEGATIVE, device=[("int", 5.5), ("unknown", "nodevice")]),
        )
        yield from _vary(
            f"{cls}.error_bound",
            codec.error_bound,
            lambda: dict(x=f32()),
            dict(x=without(_input_tensor(N), "non-contiguous")),
        )  # any layout
        yield from _vary(
            f"{cls}.slice",
            codec.slice,
            lambda enc=enc: dict(enc=enc(), start=0, stop=BLOCK),
            dict(
                enc=[("str", "x"), ("tensor", f32())],
                start=BAD_INT_NONNEGATIVE + [("unaligned", 1)],
                stop=BAD_INT_NONNEGATIVE + [("past the end", N + 1)],
            ),
        )
    # a block far beyond any tensor once made error_bound allocate block-sized buffers (4 TiB here)
    yield Case("Int8Codec.error_bound", "block", "2**40", lambda: pycomm.Int8Codec(block=2**40).error_bound(f32()))


_STORE: pycomm.TCPStore | None = None


def store() -> pycomm.TCPStore:
    """One single-rank store shared by the cases (served in this process)."""
    global _STORE
    if _STORE is None:
        _STORE = pycomm.TCPStore(HOST, 0, 1, is_server=True, timeout=30)
        _STORE.set("counter-is-bytes", b"abc")
    return _STORE


def store_cases() -> Iterator[Case]:
    yield from _vary(
        "TCPStore",
        pycomm.TCPStore,
        lambda: dict(host=HOST, port=0, world_size=1, is_server=True, timeout=30.0),
        dict(
            host=[("int", 5), ("None", None)],
            port=BAD_INT_NONNEGATIVE + [("70000", 70000)],
            world_size=BAD_INT_POSITIVE,
            is_server=BAD_BOOL,
            timeout=BAD_TIMEOUT + [("zero", 0)],
        ),
    )
    s = store
    yield from _vary(
        "TCPStore.set",
        lambda **kw: s().set(**kw),
        lambda: dict(key="k", value=b"v"),
        dict(key=BAD_KEY, value=BAD_VALUE),
    )
    yield from _vary(
        "TCPStore.get",
        lambda **kw: s().get(**kw),
        lambda: dict(key="counter-is-bytes", timeout=1.0),
        dict(key=BAD_KEY, timeout=BAD_TIMEOUT),
    )
    yield from _vary(
        "TCPStore.add", lambda **kw: s().add(**kw), lambda: dict(key="n", delta=1), dict(key=BAD_KEY, delta=BAD_INT64)
    )
    yield Case("TCPStore.add", "key", "key holding bytes", lambda: s().add("counter-is-bytes", 1))
    yield from _vary("TCPStore.check", lambda **kw: s().check(**kw), lambda: dict(key="k"), dict(key=BAD_KEY))
    yield from _vary(
        "TCPStore.wait",
        lambda **kw: s().wait(**kw),
        lambda: dict(keys=["counter-is-bytes"], timeout=1.0),
        dict(keys=[("str", "k"), ("None", None), ("list of ints", [1])], timeout=BAD_TIMEOUT),
    )
    yield from _vary(
        "TCPStore.barrier", lambda **kw: s().barrier(**kw), lambda: dict(timeout=1.0), dict(timeout=BAD_TIMEOUT)
    )


def local_comm() -> Communicator:
    return Communicator(core().local_transport(), "local")


def averager_cases() -> Iterator[Case]:
    yield from _vary(
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
    tensor = without(_input_tensor(4), "wrong dtype")
    yield from _vary(
        "Communicator.allreduce",
        c.allreduce,
        lambda: dict(tensor=f32(4), op=pycomm.SUM, async_op=False, bucket=-1),
        dict(tensor=tensor, op=BAD_OP, async_op=BAD_BOOL, bucket=[("str", "x"), ("float", 1.5), ("huge", 2**62)]),
    )
    yield from _vary(
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
        yield from _vary(
            f"Communicator.{name}",
            getattr(c, name),
            lambda: dict(out=f32(4), tensor=f32(4)),
            dict(out=_tensor_arg(4), tensor=_input_tensor(4)),
        )
    yield from _vary("Communicator.barrier", c.barrier, lambda: dict(async_op=False), dict(async_op=BAD_BOOL))
    bad_tag = [("str", "0"), ("negative", -1), ("huge", 2**62), ("past max_tag", c.max_tag + 1), ("float", 1.0)]
    bad_dst = [("str", "0"), ("None", None), ("ANY_SOURCE", pycomm.ANY_SOURCE), ("negative", -2), ("size", 1)]
    bad_src = [("str", "0"), ("None", None), ("negative", -2), ("size", 1)]  # -1 is ANY_SOURCE
    for name, peer in (("isend", "dst"), ("irecv", "src")):
        yield from _vary(
            f"Communicator.{name}",
            getattr(c, name),
            lambda peer=peer: {"tensor": f32(4), peer: 0, "tag": 0},
            {"tensor": tensor, peer: bad_dst if peer == "dst" else bad_src, "tag": bad_tag},
        )
    yield from _vary(
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
    yield from _vary(
        "Communicator.irecv_tensor", c.irecv_tensor, lambda: dict(src=0, tag=0), dict(src=bad_src, tag=bad_tag)
    )
    yield from _vary(
        "Communicator.probe",
        c.probe,
        lambda: dict(src=0, tag=0, block=False),
        dict(src=bad_src, tag=[("str", "0"), ("negative", -2), ("past max_tag", c.max_tag + 1)], block=BAD_BOOL),
    )
    yield from _vary(
        "Communicator.split",
        c.split,
        lambda: dict(color=0, key=None),
        dict(
            color=[("str", "0"), ("None", None), ("float", 0.0), ("huge", 2**62)],
            key=[("str", "0"), ("float", 0.0), ("huge", 2**62)],
        ),
    )
    yield from _vary(
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
    yield from _vary(
        "Communicator.allreduce_quantized",
        lambda **kw: c.allreduce_quantized(**kw).wait(),
        lambda: dict(tensor=f32(), op=pycomm.SUM, codec=None, error_feedback=None, async_op=True),
        dict(
            tensor=_input_tensor(N),
            op=BAD_OP,
            codec=BAD_CODEC,
            error_feedback=[
                ("str", "x"),
                ("wrong size", torch.zeros(N + 1)),
                ("wrong dtype", torch.zeros(N, dtype=torch.float64)),
            ],
        ),
    )


def all_cases() -> list[Case]:
    return [*kernel_cases(), *codec_cases(), *store_cases(), *averager_cases(), *communicator_cases()]


def outcome(case: Case) -> tuple[str, str]:
    """("clear" | "unclear" | "silent", detail)."""
    try:
        case.call()
    except case.errors as e:
        message = str(e)
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(case.arg)}(?![A-Za-z0-9_])", message):
            return "clear", message
        return "unclear", f"{type(e).__name__} not naming {case.arg!r}: {message}"
    except Exception as e:  # noqa: BLE001  (classifying is the point)
        return "unclear", f"{type(e).__name__}: {e}"
    return "silent", "accepted"


def main() -> int:
    counts = {"clear": 0, "unclear": 0, "silent": 0}
    for case in all_cases():
        kind, detail = outcome(case)
        counts[kind] += 1
        if kind != "clear":
            print(f"{kind:8s} {case.name}: {detail[:200]}")
    print(
        f"{sum(counts.values())} cases: {counts['clear']} clear, {counts['unclear']} unclear, "
        f"{counts['silent']} silently accepted"
    )
    return 0 if counts["clear"] == sum(counts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
