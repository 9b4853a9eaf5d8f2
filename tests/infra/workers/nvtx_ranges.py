"""Worker: every collective and every kernel once, sizes telling them apart, on `device` (cpu: one rank of the
local backend; cuda: one rank of NCCL), run under our NVTX injection library (tests/infra/nvtx_log.c, through
NVTX_INJECTION64_PATH). Writes to MANIFEST the ranges it must have made: pid, and per range its name and bytes.
Usage: python -m tests.infra.workers.nvtx_ranges cpu|cuda MANIFEST"""

from __future__ import annotations

import json
import os
import sys

import torch

import pycomm
from pycomm import kernels


def main() -> None:
    device, manifest = sys.argv[1], sys.argv[2]
    comm = pycomm.init(backend="nccl" if device == "cuda" else "local")
    dev = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    n = comm.size
    want: list[dict] = []

    def ones(k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.ones(k, dtype=dtype, device=dev)

    def expect(name: str, nbytes: int, kind: str) -> None:
        want.append({"name": name, "bytes": nbytes, "kind": kind})

    comm.allreduce(ones(1000), op=pycomm.SUM)
    expect("allreduce", 4000, "op")
    comm.allreduce(ones(1005), op=pycomm.SUM, async_op=True).wait()
    expect("allreduce", 4020, "op")
    comm.broadcast(ones(1001), root=0)
    expect("broadcast", 4004, "op")
    comm.allgather(ones(1002 * n), ones(1002))
    expect("allgather", 4008 * n, "op")  # nccl-tests' bytes: the output
    comm.reduce_scatter(ones(1003), ones(1003 * n), op=pycomm.SUM)
    expect("reduce_scatter", 4012 * n, "op")  # the input
    comm.alltoall(ones(1004 * n), ones(1004 * n))
    expect("alltoall", 4016 * n, "op")

    ts = [ones(300), ones(500)]
    bucket = torch.empty(800, dtype=torch.bfloat16, device=dev)
    kernels.pack(ts, bucket, scale=0.5)
    expect("pack", 3200, "kernel")
    kernels.unpack(bucket, ts)
    expect("unpack", 3200, "kernel")
    x = torch.randn(4096, device=dev)
    q, scales = kernels.quantize_int8(x)
    expect("quantize_int8", 16384, "kernel")
    kernels.dequantize_int8(q, scales, torch.empty(4096, dtype=torch.bfloat16, device=dev))
    expect("dequantize_int8", 8192, "kernel")
    kernels.dequantize_int8_accumulate(q, scales, torch.zeros(4096, device=dev))
    expect("dequantize_int8_accumulate", 16384, "kernel")
    bits, s = kernels.sign_compress(x.half())
    expect("sign_compress", 8192, "kernel")
    kernels.sign_decompress(bits, s, torch.empty(4096, device=dev))
    expect("sign_decompress", 16384, "kernel")
    kernels.sign_decompress_accumulate(bits, s, torch.zeros(4096, dtype=torch.float64, device=dev))
    expect("sign_decompress_accumulate", 32768, "kernel")
    kernels.averaging_apply(ts, torch.ones(800, device=dev), torch.zeros(800, device=dev))
    kernels.elastic_update([ones(700, torch.float64)], torch.zeros(700, dtype=torch.float64, device=dev), 0.1)
    expect("bucket_update", 3200, "kernel")
    expect("bucket_update", 5600, "kernel")
    if device == "cpu":  # fp32 host tensors: the fused reduce step (chunk of 1024 elements: whole blocks)
        comm.allreduce_quantized(ones(1000), op=pycomm.SUM, async_op=True).wait()
        expect("reduce_quantize_int8", 4096, "kernel")
    if device == "cuda":
        torch.cuda.synchronize()
    with open(manifest, "w") as f:
        json.dump({"pid": os.getpid(), "device": device, "ranges": want}, f)
    pycomm.finalize()


if __name__ == "__main__":
    main()
