"""Bad-argument cases of the codecs (Int8Codec, Int4Codec, OneBitCodec) and ErrorFeedback."""

from __future__ import annotations

from typing import Iterator

import pycomm
from tests.comm.bad_arguments.cases import (
    BAD_BOOL,
    BAD_INT_NONNEGATIVE,
    BAD_INT_POSITIVE,
    BLOCK,
    Case,
    N,
    f32,
    input_tensor,
    tensor_arg,
    vary,
    without,
)


def codec_cases() -> Iterator[Case]:
    yield from vary(
        "Int8Codec",
        pycomm.Int8Codec,
        lambda: dict(block=BLOCK, stochastic=False, seed=0),
        dict(block=BAD_INT_POSITIVE, stochastic=BAD_BOOL, seed=BAD_INT_NONNEGATIVE),
    )
    yield from vary(
        "Int4Codec",
        pycomm.Int4Codec,
        lambda: dict(block=BLOCK, stochastic=False, seed=0),
        dict(block=BAD_INT_POSITIVE + [("odd", 255)], stochastic=BAD_BOOL, seed=BAD_INT_NONNEGATIVE),
    )
    yield from vary(
        "OneBitCodec",
        pycomm.OneBitCodec,
        lambda: dict(block=BLOCK),
        dict(block=BAD_INT_POSITIVE + [("not a multiple of 8", 12)]),
    )
    for codec in (pycomm.Int8Codec(block=BLOCK), pycomm.Int4Codec(block=BLOCK), pycomm.OneBitCodec(block=BLOCK)):
        cls = type(codec).__name__

        def enc(codec=codec):
            return codec.encode(f32())

        yield from vary(
            f"{cls}.encode",
            codec.encode,
            lambda: dict(x=f32(), residual=None, out=None),
            dict(
                x=input_tensor(N),
                residual=tensor_arg(N, optional=True),
                out=[("str", "x"), ("tensor", f32()), ("other size", codec.empty(N + 1))],
            ),
        )
        for method, out in (("decode", "out"), ("decode_accumulate", "acc")):
            yield from vary(
                f"{cls}.{method}",
                getattr(codec, method),
                lambda enc=enc, out=out: {"enc": enc(), out: f32()},
                {"enc": [("str", "x"), ("None", None), ("tensor", f32())], out: input_tensor(N)},
            )
        for method in ("wire_bytes", "data_numel"):
            yield from vary(
                f"{cls}.{method}", getattr(codec, method), lambda: dict(numel=N), dict(numel=BAD_INT_NONNEGATIVE)
            )
        yield from vary(
            f"{cls}.empty",
            codec.empty,
            lambda: dict(numel=N, device="cpu"),
            dict(numel=BAD_INT_NONNEGATIVE, device=[("int", 5.5), ("unknown", "nodevice")]),
        )
        yield from vary(
            f"{cls}.error_bound",
            codec.error_bound,
            lambda: dict(x=f32()),
            dict(x=without(input_tensor(N), "non-contiguous")),
        )  # any layout
        yield from vary(
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
