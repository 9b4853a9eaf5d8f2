"""Kernel bandwidth: GB/s of each pycomm kernel against memcpy measured in the same run and against
the plain torch composition that computes the same result.

    PYCOMM_NUM_THREADS=1 python -m benchmarks.kernels            # CPU, one thread (the default)
    python -m benchmarks.kernels --device cuda --sizes 4,16,64   # on a GPU: against a D2D copy
    python -m benchmarks.kernels --quick --out /tmp/r            # seconds; for smoke tests

GB/s counts the bytes a kernel must read and write (e.g. pack fp32 -> bf16: 4 + 2 bytes per
element); memcpy GB/s counts read + write of the copied buffer, so the two are comparable.
On a GPU the results are kernels_gpu.json + PNG (naming the GPU); each call is timed by CUDA events on
the device, its launches queued behind a sleep kernel (harness.measure_gpu: the host's launch cost is
not in the figure), against a device-to-device copy of the same input size timed in the same rounds."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MIB = 1 << 20


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from pycomm import settings  # imports no compiled code: PYCOMM_NUM_THREADS may still change below

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--threads",
        type=int,
        default=settings.get("PYCOMM_NUM_THREADS") or 1,
        help="CPU threads for pycomm and torch (default: PYCOMM_NUM_THREADS or 1)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--sizes", default="4,16,64", help="fp32 input sizes in MiB, comma separated")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="one small size, few repeats (smoke test)")
    p.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats = "1", 3
    return args


@dataclass
class Case:
    """One kernel at one size: the pycomm call, the torch composition, and bytes moved per call."""

    kernel: str
    ours: Callable[[], object]
    torch_composition: Callable[[], object]
    bytes_moved: int


def _tensor_sizes(n: int, count: int = 128) -> list[int]:
    """`count` layer-like sizes (uneven, fixed seed) that sum to n."""
    import torch

    g = torch.Generator().manual_seed(0)
    w = torch.rand(count, generator=g) + 0.1
    sizes = (w / w.sum() * n).long().tolist()
    sizes[-1] += n - sum(sizes)
    return sizes


def _cases(n: int, device: str, block: int = 256) -> list[Case]:
    import torch

    from pycomm import kernels

    bf16, i8, u8 = torch.bfloat16, torch.int8, torch.uint8
    sizes = _tensor_sizes(n)
    ts = [torch.randn(s, device=device) for s in sizes]
    x = torch.randn(n, device=device)
    nb = -(-n // block)
    cases: list[Case] = []

    bucket = torch.empty(n, dtype=bf16, device=device)
    cases.append(
        Case(
            "pack f32->bf16 x0.5",
            lambda: kernels.pack(ts, bucket, scale=0.5),
            lambda: torch.cat(ts).mul_(0.5).to(bf16),
            6 * n,
        )
    )
    kernels.pack(ts, bucket)
    outs = [torch.empty_like(t) for t in ts]

    def torch_unpack():
        for o, c in zip(outs, bucket.split(sizes)):
            o.copy_(c)
        torch._foreach_mul_(outs, 0.5)

    cases.append(Case("unpack bf16->f32 x0.5", lambda: kernels.unpack(bucket, outs, scale=0.5), torch_unpack, 6 * n))

    q = torch.empty(n, dtype=i8, device=device)
    scales = torch.empty(nb, device=device)
    xb = x.view(-1, block)

    def torch_quantize(stochastic: bool):
        s = xb.abs().amax(dim=1, keepdim=True) / 127
        y = xb / torch.where(s > 0, s, torch.ones_like(s))
        y = torch.floor(y + torch.rand_like(y)) if stochastic else torch.round(y)
        return y.clamp_(-127, 127).to(i8), s

    q_bytes = 4 * n + n + 4 * nb
    cases.append(
        Case(
            "quantize int8",
            lambda: kernels.quantize_int8(x, q, scales, block=block),
            lambda: torch_quantize(False),
            q_bytes,
        )
    )
    cases.append(
        Case(
            "quantize int8 stochastic",
            lambda: kernels.quantize_int8(x, q, scales, block=block, stochastic=True, seed=1),
            lambda: torch_quantize(True),
            q_bytes,
        )
    )
    out = torch.empty(n, device=device)
    qb, sb = q.view(-1, block), scales.view(-1, 1)
    cases.append(
        Case(
            "dequantize int8",
            lambda: kernels.dequantize_int8(q, scales, out, block=block),
            lambda: torch.mul(qb, sb, out=out.view(-1, block)),
            q_bytes,
        )
    )
    cases.append(
        Case(
            "dequantize-accumulate int8",
            lambda: kernels.dequantize_int8_accumulate(q, scales, out, block=block),
            lambda: out.view(-1, block).add_(qb * sb),
            q_bytes + 4 * n,
        )
    )

    residual = torch.zeros(n, device=device)
    bits = torch.empty(n // 8, dtype=u8, device=device)
    weights = (2 ** torch.arange(8, device=device)).to(u8)

    def torch_sign_compress():
        v = (x + residual).view(-1, block)
        s = v.abs().mean(dim=1, keepdim=True)
        pos = v >= 0
        packed = (pos.view(-1, 8).to(u8) * weights).sum(dim=1, dtype=u8)
        residual.view(-1, block).copy_(v - torch.where(pos, s, -s))
        return packed, s

    cases.append(
        Case(
            "1-bit compress +residual",
            lambda: kernels.sign_compress(x, bits, scales, block=block, residual=residual),
            torch_sign_compress,
            4 * n * 3 + n // 8 + 4 * nb,
        )
    )

    def torch_sign_decompress():
        pos = (bits.unsqueeze(1) & weights).ne(0).view(-1, block)
        return torch.where(pos, sb, -sb)

    cases.append(
        Case(
            "1-bit decompress",
            lambda: kernels.sign_decompress(bits, scales, out, block=block),
            torch_sign_decompress,
            n // 8 + 4 * nb + 4 * n,
        )
    )

    avg, snap, centre = (torch.randn(n, device=device) for _ in range(3))

    def torch_averaging_apply():
        torch._foreach_add_(ts, list((avg - snap).split(sizes)))

    cases.append(
        Case(
            "averaging apply (x += avg - snap)",
            lambda: kernels.averaging_apply(ts, avg, snap),
            torch_averaging_apply,
            16 * n,
        )
    )
    centre_views = list(centre.split(sizes))
    cases.append(
        Case(
            "elastic update (x = (1-a)x + a c)",
            lambda: kernels.elastic_update(ts, centre, 0.1),
            lambda: torch._foreach_lerp_(ts, centre_views, 0.1),
            12 * n,
        )
    )
    return cases


def _copy_gbps(nbytes: int, device: str, repeats: int, sync) -> float:
    import torch

    from benchmarks.harness import measure

    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / measure(lambda: dst.copy_(src), repeats=repeats, sync=sync).median / 1e9


def _interleaved(
    fns: dict[str, Callable[[], object]], repeats: int, sync, measure, evict: Callable[[], object]
) -> dict:
    """Timing of each fn, taken in alternating rounds (one harness.measure per fn per round), so a
    shared machine's changing load hits all of them alike; median/min/max over the rounds. `evict`
    (untimed) runs before each timed call, so every fn starts from cold caches: otherwise a fn
    would find in cache what the fn before it just touched (torch's composition reads and writes
    the tensors pycomm's kernel just updated), and the order would pick the winner at sizes
    that fit the last-level cache."""
    from benchmarks.harness import Timing

    for f in fns.values():
        f()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            evict()
            if sync is not None:
                sync()
            samples[k].append(measure(f, repeats=1, warmup=0, sync=sync).median)
    return {k: Timing(statistics.median(v), min(v), max(v), len(v), v) for k, v in samples.items()}


def run(args: argparse.Namespace) -> dict:
    os.environ["PYCOMM_NUM_THREADS"] = str(args.threads)  # handed to the compiled core when it loads
    import torch

    from benchmarks.harness import measure, measure_gpu, save, table
    from pycomm import build_info as pycomm_build

    on_gpu = args.device != "cpu"
    sync = torch.cuda.synchronize if on_gpu else None
    sizes_mib = [float(s) for s in args.sizes.split(",")]
    # memcpy of a buffer well beyond the caches (smaller in --quick mode, to stay fast)
    copy_bytes = int(max(max(sizes_mib), 16 if args.quick else 64) * MIB)

    src = torch.ones(copy_bytes // 4, device=args.device)
    dst = torch.empty_like(src)
    if on_gpu:  # a device-to-device copy: the GPU's own peer (the threads do not matter)
        gpu_name = torch.cuda.get_device_name(torch.device(args.device))
        d2d = 2 * copy_bytes / measure_gpu(lambda: dst.copy_(src), repeats=args.repeats).median / 1e9
        memcpy_gbps = {"device_to_device": d2d}
    else:
        torch.set_num_threads(1)
        memcpy_1t = _copy_gbps(copy_bytes, args.device, args.repeats, sync)
        torch.set_num_threads(os.cpu_count() or 1)
        memcpy_all = _copy_gbps(copy_bytes, args.device, args.repeats, sync)
        torch.set_num_threads(args.threads)
        memcpy_same = _copy_gbps(copy_bytes, args.device, args.repeats, sync)
        memcpy_gbps = {
            "single_thread": memcpy_1t,
            "all_threads": memcpy_all,
            "threads_used": memcpy_same,
            "all_threads_count": os.cpu_count(),
        }

    # copying buffers of their own (64 MiB in a full run, twice the last-level cache of the machines we
    # use) pushes the kernels' buffers and memcpy's out of cache
    evict_src, evict_dst = torch.ones_like(src), torch.empty_like(src)

    def memcpy_1thread():
        torch.set_num_threads(1)
        dst.copy_(src)
        torch.set_num_threads(args.threads)

    goal = 0.5 if args.device == "cpu" else 0.8  # of memcpy (CPU) / device-to-device copy (GPU)
    goal_from_mib = 0 if args.device == "cpu" else 16  # the GPU goal holds from 16 MiB (launch-bound below)
    timer = measure if not on_gpu else lambda f, repeats, warmup, sync: measure_gpu(f, repeats, warmup)
    rows = []
    for mib in sizes_mib:
        n = int(mib * MIB) // 4 // 256 * 256
        # GPU: a copy of the kernels' input size (in the same cache regime); CPU: the single-thread memcpy
        case_src = src[:n] if on_gpu else None
        case_dst = dst[:n] if on_gpu else None
        peer_bytes = 4 * n if on_gpu else copy_bytes
        for case in _cases(n, args.device):
            t = _interleaved(
                {
                    "ours": case.ours,
                    "torch": case.torch_composition,
                    "memcpy": memcpy_1thread if not on_gpu else lambda: case_dst.copy_(case_src),
                },
                args.repeats,
                sync,
                timer,
                evict=lambda: evict_dst.copy_(evict_src),
            )
            gbps = case.bytes_moved / t["ours"].median / 1e9
            copy = 2 * peer_bytes / t["memcpy"].median / 1e9
            rows.append(
                {
                    "kernel": case.kernel,
                    "MiB": mib,
                    "GB/s": gbps,
                    "best GB/s": case.bytes_moved / t["ours"].min / 1e9,
                    "torch GB/s": case.bytes_moved / t["torch"].median / 1e9,
                    "vs torch": t["torch"].median / t["ours"].median,
                    "memcpy GB/s": copy,
                    "of memcpy": gbps / copy,
                    "min ms": t["ours"].min * 1e3,
                    "median ms": t["ours"].median * 1e3,
                    "max ms": t["ours"].max * 1e3,
                    "torch median ms": t["torch"].median * 1e3,
                }
            )
            rows[-1]["goal met"] = (
                rows[-1]["of memcpy"] >= goal and rows[-1]["vs torch"] > 1 if mib >= goal_from_mib else None
            )
    cols = [
        "kernel",
        "MiB",
        "GB/s",
        "best GB/s",
        "torch GB/s",
        "vs torch",
        "memcpy GB/s",
        "of memcpy",
        "min ms",
        "median ms",
        "max ms",
        "goal met",
    ]
    peer_name = "single-thread memcpy" if args.device == "cpu" else "device-to-device copy"
    isa = pycomm_build().get("cpu_isa", "?")
    if on_gpu:
        print(
            f"device={args.device} ({gpu_name})  device-to-device copy of {copy_bytes >> 20} MiB: {d2d:.0f} GB/s; "
            f"'of memcpy' is against a copy of each size's input, timed in the same rounds as each kernel"
        )
    else:
        print(
            f"device={args.device} threads={args.threads} cpu_isa={isa}  memcpy GB/s: 1 thread {memcpy_1t:.2f}, "
            f"{os.cpu_count()} threads {memcpy_all:.2f}, {args.threads} thread(s) {memcpy_same:.2f}; "
            f"'of memcpy' is against {peer_name}, timed in the same rounds as each kernel"
        )
    print(table(rows, cols))

    payload = {
        "device": args.device,
        "threads": args.threads,
        "repeats": args.repeats,
        "cpu_isa": isa,
        "memcpy_GBps": memcpy_gbps,
        "peer": peer_name,
        "rows": rows,
        "goals": {"of_memcpy_min": goal, "from_MiB": goal_from_mib, "faster_than_torch": True},
    }
    if on_gpu:
        payload["gpu"] = gpu_name
        for r in rows:
            if r["MiB"] == max(sizes_mib):
                print(
                    f"GPU-RESULT: {r['kernel']} at {r['MiB']:g} MiB: {r['GB/s']:.0f} GB/s = {r['of memcpy']:.0%} of "
                    f"a D2D copy, {r['vs torch']:.2f}x the torch composition (goal met: {r['goal met']})"
                )

    def plot(ax):
        largest = [r for r in rows if r["MiB"] == max(sizes_mib)]
        ys = range(len(largest))
        ax.barh([y + 0.2 for y in ys], [r["GB/s"] for r in largest], height=0.4, label="pycomm")
        ax.barh([y - 0.2 for y in ys], [r["torch GB/s"] for r in largest], height=0.4, label="torch composition")
        peer = statistics.median(r["memcpy GB/s"] for r in largest)
        ax.axvline(peer, color="k", ls="--", label=peer_name)
        ax.axvline(payload["goals"]["of_memcpy_min"] * peer, color="grey", ls=":", label="goal")
        ax.set_yticks(list(ys), [r["kernel"] for r in largest], fontsize=8)
        ax.set_xlabel("GB/s (bytes read + written per call / median time)")
        where = gpu_name if on_gpu else f"{args.device}, {args.threads} thread(s)"
        ax.set_title(f"pycomm kernels, {max(sizes_mib):g} MiB fp32, {where}")
        ax.legend(fontsize=8)

    path = save("kernels_gpu" if on_gpu else "kernels", payload, plot, results_dir=args.out)
    print(f"wrote {path}")
    return payload


def main(argv: list[str] | None = None) -> int:
    run(_parse(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
