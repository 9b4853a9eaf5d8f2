"""Worker (ranks sharing a GPU, MPI with pinned staging): allreduce_quantized of CUDA tensors, on the GPU
codec kernels. The CPU and GPU codecs give the same bytes: int8 results equal the reference's bytes (as the
host run's do), and a stochastic int8 run with a seed equals the same call on host tensors; 1-bit with error
feedback equals pycomm's own sign kernels composed on the GPU, call after call; and the call follows the
caller's stream. Prints `rank R: quantized gpu ok (N checks)` and `GPU-RESULT:` lines."""

from __future__ import annotations

import os

import torch

import pycomm
from tests.comm.workers.fusion_common import rank_values, world
from tests.comm.workers.quantized import SIZES, expected_int8, expected_onebit_calls

SEGMENT = 1000  # several segments for the larger sizes: the pipeline, not one call
HALF_SECOND = 1_000_000_000  # torch.cuda._sleep cycles at about 2 GHz
checks = 0


def same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    global checks
    bad = torch.nonzero(got.cpu() != want.cpu())
    assert bad.numel() == 0, (
        f"{what}: element {bad[0].item()} is {got.flatten()[bad[0]].item()}, "
        f"expected {want.flatten()[bad[0]].item()} ({bad.numel()} differ)"
    )
    checks += 1


def check_int8(comm, dev: torch.device) -> None:
    for k, n in enumerate(SIZES):
        xs = [rank_values(140 + k, r, n, torch.float32) for r in range(comm.size)]
        for op in ("AVG", "SUM"):
            t = xs[comm.rank].to(dev)
            comm.allreduce_quantized(t, op=getattr(pycomm, op), codec=pycomm.Int8Codec(block=256), async_op=True).wait()
            same(t, expected_int8(xs, op, 256, SEGMENT), f"int8 {op} n={n} on the GPU vs the reference")


def check_stochastic_int8_equals_host(comm, dev: torch.device) -> None:
    for k, n in enumerate(SIZES):
        x = rank_values(160 + k, comm.rank, n, torch.float32)
        host, gpu = x.clone(), x.to(dev)
        for t in (host, gpu):
            codec = pycomm.Int8Codec(block=64, stochastic=True, seed=1234 + comm.rank)
            for _ in range(2):  # the second call takes the codec's advanced seeds
                comm.allreduce_quantized(t, op=pycomm.AVG, codec=codec, async_op=True).wait()
        same(gpu, host, f"stochastic int8 n={n}: GPU vs host bytes")


def check_onebit_error_feedback(comm, dev: torch.device) -> None:
    for k, n in enumerate(SIZES):
        calls = [
            [rank_values(180 + 3 * k + c, r, n, torch.float32).to(dev) for r in range(comm.size)] for c in range(3)
        ]
        wants = expected_onebit_calls(calls, "AVG", 256, SEGMENT)
        ef = pycomm.ErrorFeedback()
        for c, (xs, want) in enumerate(zip(calls, wants)):
            t = xs[comm.rank].clone()
            comm.allreduce_quantized(
                t, op=pycomm.AVG, codec=pycomm.OneBitCodec(block=256), error_feedback=ef, async_op=True
            ).wait()
            same(t, want, f"1-bit + error feedback n={n} call {c} vs the GPU kernels composed")
        assert ef.local.is_cuda and ef.server.is_cuda


def check_stream_order(comm, dev: torch.device) -> None:
    """The input is written on a side stream behind half a second of work; the call must see that write,
    and a kernel queued on that stream after wait() its result."""
    side = torch.cuda.Stream(dev)
    n = 4099
    xs = [rank_values(200, r, n, torch.float32) for r in range(comm.size)]
    mine = xs[comm.rank].to(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        t = torch.zeros(n, device=dev)
        torch.cuda._sleep(HALF_SECOND)
        t.copy_(mine)
        comm.allreduce_quantized(t, op=pycomm.SUM, codec=pycomm.Int8Codec(block=256), async_op=True).wait()
        doubled = t * 2
    side.synchronize()
    same(doubled, expected_int8(xs, "SUM", 256, SEGMENT) * 2, "int8 SUM written late on a side stream")


def throughput(comm, dev: torch.device) -> None:
    """Not a check: seconds of a 64 MiB fp32 int8 all-reduce on the GPU, for the summary."""
    t = torch.randn(16 << 20, device=dev)
    os.environ.pop("PYCOMM_QUANTIZED_SEGMENT")
    comm.allreduce_quantized(t, op=pycomm.AVG, async_op=True).wait()
    torch.cuda.synchronize(dev)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        comm.allreduce_quantized(t, op=pycomm.AVG, async_op=True).wait()
    stop.record()
    stop.synchronize()
    if comm.rank == 0:
        ms = start.elapsed_time(stop) / 3
        print(
            f"GPU-RESULT: allreduce_quantized int8 of 64 MiB fp32 on {comm.size} ranks sharing "
            f"{torch.cuda.get_device_name(dev)} over MPI (staged): {ms:.1f} ms",
            flush=True,
        )


def main() -> None:
    os.environ["PYCOMM_QUANTIZED_SEGMENT"] = str(SEGMENT)
    comm = world()
    dev = torch.device("cuda", comm.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    check_int8(comm, dev)
    check_stochastic_int8_equals_host(comm, dev)
    check_onebit_error_feedback(comm, dev)
    check_stream_order(comm, dev)
    throughput(comm, dev)
    comm.barrier()
    print(f"rank {comm.rank}: quantized gpu ok ({checks} checks)", flush=True)
    pycomm.finalize()


if __name__ == "__main__":
    main()
