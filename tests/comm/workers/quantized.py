"""Worker: allreduce_quantized (int8, int4 and 1-bit) against a numpy reference: the error stays within the
bound of its two quantization stages, error feedback carries the loss across steps, and the bytes
each rank sends are O(S), not O(N S)."""

from __future__ import annotations

import functools
import os

import numpy as np
import torch

import pycomm
from pycomm._quantized_phases import PHASES, profile_phases
from pycomm._quantized_pipeline import SEGMENT, SEGMENT_ON_OWN_CORES, default_segment
from pycomm.quantized import segments
from tests.comm.workers.fusion_common import bytes_sent, expect_raises, rank_values, world
from tests.kernels import reference as ref

SIZES = [0, 1, 7, 255, 256, 257, 1000, 4099, 100_003]


def blockwise_absmax(v: np.ndarray, block: int) -> np.ndarray:
    """Per element, max |v| over its codec block (blocks start at 0: chunks are whole blocks)."""
    pad = -len(v) % block
    m = np.abs(np.concatenate([v, np.zeros(pad)])).reshape(-1, block).max(1)
    return np.repeat(m, block)[: len(v)]


def absmax_bound(xs: np.ndarray, op: str, block: int, max_level: int = 127) -> np.ndarray:
    """Stage 1: rank r's element errs by at most absmax_r / (2 max_level) (scale / 2: 254 for int8, 14
    for int4); the reduce sums them (and AVG divides by N). Stage 2 re-quantizes the reduced value, whose
    block absmax is at most that of the exact result plus stage 1's error: another (absmax + e1) / 254."""
    n, half_levels = xs.shape[0], 2 * max_level
    div = n if op == "AVG" else 1
    e1 = sum(blockwise_absmax(x, block) for x in xs) / half_levels / div
    y = xs.sum(0) / div
    e1_block = blockwise_absmax(e1, block)
    e2 = (blockwise_absmax(y, block) + e1_block) / half_levels
    return (e1 + e2) * (1 + 1e-5) + 1e-6 * (np.abs(xs).sum(0) / div + 1)


def check_int8(comm, op: str, dtype: torch.dtype, block: int, codec_class: type = pycomm.Int8Codec) -> None:
    """Within absmax_bound for every size; `codec_class`: Int8Codec or Int4Codec (block even)."""
    codec = codec_class(block=block)
    for k, n in enumerate(SIZES):
        xs = np.stack([rank_values(k, r, n, torch.float32).to(dtype).double().numpy() for r in range(comm.size)])
        t = torch.from_numpy(xs[comm.rank]).to(dtype)
        comm.allreduce_quantized(t, op=getattr(pycomm, op), codec=codec, async_op=True).wait()
        y = xs.sum(0) / (comm.size if op == "AVG" else 1)
        err = np.abs(t.double().numpy() - y)
        bound = absmax_bound(xs, op, block, codec.max_level) + float(torch.finfo(dtype).eps) * np.abs(y)
        bad = np.nonzero(err > bound)[0]
        assert bad.size == 0, (
            f"{codec!r} {op} {dtype} n={n}: element {bad[0]} error {err[bad[0]]} > bound {bound[bad[0]]}"
        )
        if n >= 1000:
            assert err.max() > 0, "no quantization error at all: was the tensor quantized?"


def expected_int8(xs: list[torch.Tensor], op: str, block: int, segment: int) -> torch.Tensor:
    """docs/algorithms.md's int8 all-reduce from the reference kernels, chunk by chunk of every segment:
    the chunk's owner adds the other ranks' decoded encodings in rank order to its exact values (fp32),
    scales by 1/N for AVG, and everyone decodes its re-encoding. `segment`: the default segment."""
    size, numel = len(xs), xs[0].numel()
    out = torch.empty(numel)
    for seg in segments(numel, size, block, segment):
        for owner in range(size):
            lo, hi = min(seg.lo + owner * seg.c, seg.hi), min(seg.lo + (owner + 1) * seg.c, seg.hi)
            padded = [torch.cat([x[lo:hi], torch.zeros(seg.c - (hi - lo))]) for x in xs]
            acc = padded[owner].clone()
            for r in range(size):
                if r != owner:
                    acc += ref.dequantize_int8(*ref.quantize_int8(padded[r], block)[:2], block)
            if op == "AVG":
                acc *= torch.tensor(1.0 / size, dtype=torch.float32)
            q, scales, _ = ref.quantize_int8(acc, block)
            out[lo:hi] = ref.dequantize_int8(q, scales, block)[: hi - lo]
    return out


def host_segment(comm) -> int:
    """The default segment of a host tensor on `comm` (every rank agrees on comm.oversubscribed)."""
    return default_segment(comm.oversubscribed, on_gpu=False)


def check_default_segment(comm) -> None:
    """Unset PYCOMM_QUANTIZED_SEGMENT: a tensor of 1.5 Mi elements is cut at the default segment (two
    segments of about 1 Mi where comm.oversubscribed is False, else one of 4 Mi), byte for byte the
    reference's."""
    n = SEGMENT_ON_OWN_CORES * 3 // 2 + 3
    xs = [rank_values(90, r, n, torch.float32) for r in range(comm.size)]
    t = xs[comm.rank].clone()
    comm.allreduce_quantized(t, op=pycomm.SUM, async_op=True).wait()
    want = expected_int8(xs, "SUM", 256, host_segment(comm))
    assert torch.equal(t, want), f"default segment {host_segment(comm)}: not the reference's bytes"
    if comm.size > 1:  # one rank's chunk is the whole segment: both cuts give the same blocks
        other = SEGMENT if host_segment(comm) == SEGMENT_ON_OWN_CORES else SEGMENT_ON_OWN_CORES
        assert not torch.equal(want, expected_int8(xs, "SUM", 256, other)), "the check cannot tell the segments apart"


def check_int8_exact(comm) -> None:
    """fp32 int8 all-reduce gives exactly the reference's bytes (the fused reduce kernel included)."""
    for k, n in enumerate(SIZES):
        xs = [rank_values(40 + k, r, n, torch.float32) for r in range(comm.size)]
        for op in ("AVG", "SUM"):
            t = xs[comm.rank].clone()
            comm.allreduce_quantized(t, op=getattr(pycomm, op), codec=pycomm.Int8Codec(block=256), async_op=True).wait()
            want = expected_int8(xs, op, 256, host_segment(comm))
            bad = torch.nonzero(t != want)
            assert bad.numel() == 0, (
                f"int8 {op} n={n}: element {bad[0].item()} is {t[bad[0]].item()}, the reference "
                f"gives {want[bad[0]].item()}"
            )


def expected_onebit_calls(
    xs_per_call: list[list[torch.Tensor]], op: str, block: int, segment: int
) -> list[torch.Tensor]:
    """docs/algorithms.md's 1-bit all-reduce with error feedback over successive calls, from pycomm's own
    sign kernels run one after another (the reference's scales sum in another order), on the inputs' device:
    every rank's local residual encodes the chunks it sends, the owner spends its own and re-encodes the
    reduced chunk with its server residual, and everyone decodes that."""
    size, numel = len(xs_per_call[0]), xs_per_call[0][0].numel()
    dev = xs_per_call[0][0].device
    segs = segments(numel, size, block, segment)
    local = [torch.zeros(numel, device=dev) for _ in range(size)]
    server = [torch.zeros(sum(g.c for g in segs), device=dev) for _ in range(size)]
    outs = []
    for xs in xs_per_call:
        out = torch.empty(numel, device=dev)
        for seg in segs:
            for owner in range(size):
                lo, hi = min(seg.lo + owner * seg.c, seg.hi), min(seg.lo + (owner + 1) * seg.c, seg.hi)
                pad = lambda v: torch.cat([v[lo:hi], torch.zeros(seg.c - (hi - lo), device=dev)])  # noqa: E731
                acc = pad(xs[owner] + local[owner])
                local[owner][lo:hi] = 0.0
                for r in range(size):
                    if r != owner:
                        res = pad(local[r])
                        bits, scales = pycomm.kernels.sign_compress(pad(xs[r]), block=block, residual=res)
                        local[r][lo:hi] = res[: hi - lo]
                        pycomm.kernels.sign_decompress_accumulate(bits, scales, acc, block=block)
                if op == "AVG":
                    acc *= torch.tensor(1.0 / size, dtype=torch.float32, device=dev)
                bits, scales = pycomm.kernels.sign_compress(
                    acc, block=block, residual=server[owner][seg.mine : seg.mine + seg.c]
                )
                out[lo:hi] = pycomm.kernels.sign_decompress(bits, scales, torch.empty(seg.c, device=dev), block=block)[
                    : hi - lo
                ]
        outs.append(out)
    return outs


def check_onebit_exact(comm) -> None:
    """fp32 1-bit all-reduce with an ErrorFeedback gives exactly the composed kernels' bytes on every call
    (the fused reduce kernel, which also decodes the rank's own chunk, and the residuals' state)."""
    for k, n in enumerate(SIZES):
        for op in ("AVG", "SUM"):
            calls = [[rank_values(60 + 3 * k + c, r, n, torch.float32) for r in range(comm.size)] for c in range(3)]
            wants = expected_onebit_calls(calls, op, 256, host_segment(comm))
            ef = pycomm.ErrorFeedback()
            for c, (xs, want) in enumerate(zip(calls, wants)):
                t = xs[comm.rank].clone()
                comm.allreduce_quantized(
                    t, op=getattr(pycomm, op), codec=pycomm.OneBitCodec(block=256), error_feedback=ef, async_op=True
                ).wait()
                bad = torch.nonzero(t != want)
                assert bad.numel() == 0, (
                    f"1-bit {op} n={n} call {c}: element {bad[0].item()} is {t[bad[0]].item()}, "
                    f"the composed kernels give {want[bad[0]].item()}"
                )


def run_steps(comm, codec, n: int, steps: int, error_feedback) -> tuple[float, float]:
    """All-reduce the same input `steps` times; RMS error of the first output and of the mean output."""
    xs = np.stack([rank_values(90, r, n, torch.float32).double().numpy() for r in range(comm.size)])
    y = xs.mean(0)
    total = np.zeros(n)
    first = None
    for _ in range(steps):
        t = torch.from_numpy(xs[comm.rank]).float()
        comm.allreduce_quantized(t, op=pycomm.AVG, codec=codec, error_feedback=error_feedback, async_op=True).wait()
        out = t.double().numpy()
        first = out if first is None else first
        total += out
    rms = lambda v: float(np.sqrt(np.mean(v**2)))  # noqa: E731
    return rms(first - y), rms(total / steps - y)


def check_error_feedback(comm) -> None:
    n = 10_007
    one_step, averaged = run_steps(comm, pycomm.OneBitCodec(block=256), n, 40, pycomm.ErrorFeedback())
    # with the residuals, what one step loses is sent in the next: the mean over steps converges
    # (as K^-1/2 for 1-bit sign on a fixed input: ~0.2x after 40 steps), without them it does not
    assert averaged < 0.35 * one_step, f"1-bit + error feedback: mean error {averaged} vs one step {one_step}"
    no_ef_one, no_ef_avg = run_steps(comm, pycomm.OneBitCodec(block=256), n, 10, None)
    assert no_ef_avg > 0.5 * no_ef_one, "without error feedback 1-bit errors should not average out"
    int8 = pycomm.Int8Codec(block=256)
    _, no_ef = run_steps(comm, int8, n, 20, None)
    one_step, averaged = run_steps(comm, int8, n, 20, pycomm.ErrorFeedback())
    print(f"rank {comm.rank}: int8 mean error without feedback {no_ef}, with both residuals {averaged}")
    assert averaged < 0.3 * one_step, f"int8 + ErrorFeedback: mean error {averaged} vs one step {one_step}"
    if comm.size == 1:
        return  # stage 1 is exact on one rank: a plain residual has no loss to carry
    residual = torch.zeros(n)  # a plain tensor: stage 1's loss only (stage 2's is not fed back)
    _, local_only = run_steps(comm, int8, n, 20, residual)
    print(f"rank {comm.rank}: int8 mean error with the local residual only {local_only}")
    assert local_only < 0.8 * no_ef, f"int8 + residual tensor: mean error {local_only} vs none {no_ef}"
    assert residual.abs().max() > 0, "the residual tensor was not updated"


def check_bytes(comm) -> None:
    """Bytes sent per rank ~ 2 (N-1)/N * wire bytes: compare with the fp32 size S, independent of N."""
    n = 1 << 20
    for codec, limit in (
        (pycomm.Int8Codec(block=256), 0.3),
        (pycomm.Int4Codec(block=128), 0.15),
        (pycomm.OneBitCodec(block=256), 0.05),
    ):
        t = torch.ones(n)
        before = bytes_sent()
        comm.allreduce_quantized(t, codec=codec, op=pycomm.AVG, async_op=True).wait()
        sent = bytes_sent() - before
        s = 4 * n
        assert sent <= 2 * limit * s, f"{type(codec).__name__}: sent {sent} bytes for a {s}-byte tensor"
        if comm.size > 1:
            assert sent > 0, "no bytes recorded in pycomm.stats()"


def check_bad_input(comm) -> None:
    f = functools.partial(comm.allreduce_quantized, op=pycomm.AVG, async_op=True)  # each case overrides one
    expect_raises(TypeError, r"tensor: dtype torch.int64", lambda: f(torch.ones(4, dtype=torch.int64)))
    expect_raises(ValueError, r"tensor: tensor must be contiguous", lambda: f(torch.ones(4, 4).t()))
    expect_raises(ValueError, "op must be pycomm.SUM or pycomm.AVG", lambda: f(torch.ones(4), op=pycomm.MAX))
    expect_raises(
        ValueError, "codec 'int9' is not a codec name; expected one of 'int8'", lambda: f(torch.ones(4), codec="int9")
    )
    expect_raises(ValueError, "residual must have", lambda: f(torch.ones(4), error_feedback=torch.zeros(5)))
    expect_raises(
        TypeError,
        r"error_feedback: dtype",
        lambda: f(torch.ones(4), error_feedback=torch.zeros(4, dtype=torch.float64)),
    )
    ef = pycomm.ErrorFeedback()
    f(torch.ones(300), error_feedback=ef).wait()
    expect_raises(ValueError, "one ErrorFeedback per tensor", lambda: f(torch.ones(301), error_feedback=ef))


def check_phase_profile(comm) -> None:
    """Under profile_phases() every segment records each phase once, in pipeline order; outside, nothing."""
    n = 4099
    with profile_phases() as log:
        comm.allreduce_quantized(torch.ones(n), op=pycomm.AVG, async_op=True).wait()
        comm.allreduce_quantized(torch.ones(n), codec=pycomm.OneBitCodec(), op=pycomm.AVG, async_op=True).wait()
    comm.allreduce_quantized(torch.ones(n), op=pycomm.AVG, async_op=True).wait()
    count = len(segments(n, comm.size, 256, host_segment(comm)))
    assert log.calls == 2 and len(log.rows) == 2 * count * len(PHASES), (log.calls, len(log.rows), count)
    for call in range(2):
        for seg in range(count):
            rows = [r for r in log.rows if r[:2] == (call, seg)]
            assert [r[2] for r in rows] == list(PHASES), rows
            assert all(t0 <= t1 for *_, t0, t1 in rows) and all(a[4] <= b[3] for a, b in zip(rows, rows[1:]))
    assert set(log.totals()) == set(PHASES)


def check_pipelined(comm) -> None:
    """Segments of ~1000 elements: tensors above that run as a pipeline of many segments (ragged last
    segment, chunks clipped at its end), with the same error bound and working error feedback."""
    os.environ["PYCOMM_QUANTIZED_SEGMENT"] = "1000"
    try:
        check_int8(comm, "AVG", torch.float32, 256)
        check_int8(comm, "SUM", torch.bfloat16, 64)
        check_int8_exact(comm)
        check_onebit_exact(comm)
        check_phase_profile(comm)
        check_error_feedback(comm)
        os.environ["PYCOMM_QUANTIZED_SEGMENT"] = "0"
        expect_raises(
            ValueError,
            "PYCOMM_QUANTIZED_SEGMENT='0' is not valid",
            lambda: comm.allreduce_quantized(torch.ones(4), op=pycomm.AVG, async_op=True),
        )
    finally:
        del os.environ["PYCOMM_QUANTIZED_SEGMENT"]


def main() -> None:
    comm = world()
    check_bad_input(comm)
    for op in ("AVG", "SUM"):
        check_int8(comm, op, torch.float32, 256)
    check_int8(comm, "AVG", torch.bfloat16, 64)
    check_int8(comm, "AVG", torch.float32, 128, pycomm.Int4Codec)  # the fused int4 reduce (fp32 on the CPU)
    check_int8(comm, "SUM", torch.bfloat16, 64, pycomm.Int4Codec)  # the kernels one after another
    check_int8_exact(comm)
    check_onebit_exact(comm)
    check_error_feedback(comm)
    check_default_segment(comm)
    check_bytes(comm)
    check_pipelined(comm)
    print(f"rank {comm.rank}/{comm.size}: quantized ok", flush=True)


if __name__ == "__main__":
    main()
