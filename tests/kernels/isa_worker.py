"""Runs every CPU kernel on fixed inputs and saves the outputs (used by test_isa.py, which runs it
once per CPU kernel variant)."""

import sys

import torch

import pycomm
from pycomm import kernels


def outputs() -> dict:
    g = torch.Generator().manual_seed(0)
    res = {"isa": pycomm.build_info()["cpu_isa"]}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = (torch.randn(5000, generator=g) * 3).to(dtype)
        e = torch.randn(5000, generator=g) * 0.01
        for stochastic in (False, True):
            r = e.clone()
            q, s = kernels.quantize_int8(x, block=100, stochastic=stochastic, seed=3, residual=r)
            res[f"q{dtype}{stochastic}"], res[f"s{dtype}{stochastic}"], res[f"r{dtype}{stochastic}"] = q, s, r
            res[f"dq{dtype}{stochastic}"] = kernels.dequantize_int8(q, s, torch.empty(5000, dtype=dtype), block=100)
            r = e[:4999].clone()  # int4: an odd size ends inside a byte
            q, s = kernels.quantize_int4(x[:4999], block=100, stochastic=stochastic, seed=3, residual=r)
            res[f"q4{dtype}{stochastic}"], res[f"s4{dtype}{stochastic}"], res[f"r4{dtype}{stochastic}"] = q, s, r
            res[f"dq4{dtype}{stochastic}"] = kernels.dequantize_int4(q, s, torch.empty(4999, dtype=dtype), block=100)
        r = e.clone()
        bits, s = kernels.sign_compress(x, block=64, residual=r)
        res[f"bits{dtype}"], res[f"bs{dtype}"], res[f"br{dtype}"] = bits, s, r
        res[f"sd{dtype}"] = kernels.sign_decompress_accumulate(bits, s, torch.ones(5000, dtype=dtype), block=64)
        ts = [t.to(dtype) for t in torch.randn(5000, generator=g).split([1, 7, 992, 4000])]
        bucket = kernels.pack(ts, torch.empty(5000, dtype=torch.bfloat16), scale=1 / 3)
        res[f"pack{dtype}"] = bucket
        kernels.averaging_apply(ts, bucket, torch.randn(5000, generator=g).to(torch.bfloat16))
        kernels.elastic_update(ts, torch.randn(5000, generator=g), 0.3)
        res[f"upd{dtype}"] = torch.cat(ts)
    return res


if __name__ == "__main__":
    torch.save(outputs(), sys.argv[1])
