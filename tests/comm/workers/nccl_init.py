"""pycomm.init(backend="nccl") in a fresh process, however it was launched (single, torchrun-style
environment with a TCP store, mpirun): one all-reduce of a CUDA tensor checked against the sum."""

from __future__ import annotations

import torch

import pycomm


def main() -> None:
    comm = pycomm.init(backend="nccl")
    assert comm.backend == "nccl", comm.backend
    t = torch.full((1000,), float(comm.rank + 1), device="cuda")
    comm.allreduce(t, op=pycomm.SUM)
    expected = comm.size * (comm.size + 1) / 2
    torch.cuda.synchronize()
    assert torch.all(t == expected).item(), (t[:4].tolist(), expected)
    comm.barrier()
    pycomm.finalize()
    print(f"rank {comm.rank}: ok")


if __name__ == "__main__":
    main()
