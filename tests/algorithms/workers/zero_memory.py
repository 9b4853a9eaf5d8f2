"""Bytes per rank of parameters + gradients + optimizer state after a step (counted from the live
tensors, algorithms/zero/memory.py) against the ZeRO paper's formulas for Adam with Psi parameters:
DDP 16 Psi (fp32), stage 1 (4 + 12/N) Psi, stage 2 (2 + 14/N) Psi, stage 3 16 Psi / N (bf16 parameters
and gradients, fp32 masters and Adam state). argv: OUT_DIR."""

from __future__ import annotations

from typing import Any, Callable

import torch

import algorithms
from algorithms.zero.memory import optimizer_tensors, storage_bytes
from tests.algorithms.workers.common import run_cases, world

TOLERANCE = 0.10
WIDTH, DEPTH = 256, 4


def make_model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def one_step(comm: Any, algorithm: str, **options: Any) -> tuple[torch.nn.Module, Any]:
    model = make_model()
    opt = algorithms.CommOptimizer(
        torch.optim.AdamW(model.parameters(), lr=1e-3), algorithm=algorithm, comm=comm, model=model, **options
    )
    x = torch.randn(8, WIDTH, generator=torch.Generator().manual_seed(comm.rank))
    model(x).float().square().mean().backward()
    opt.step()
    return model, opt


def measured(comm: Any, algorithm: str) -> dict[str, int]:
    if algorithm == "ddp":
        model, opt = one_step(comm, "mbsgd")
        seen: set[int] = set()
        params = storage_bytes(model.parameters(), seen)
        grads = storage_bytes([p.grad for p in model.parameters()], seen)
        state = storage_bytes(optimizer_tensors(opt.optimizer), seen)
        return {"params": params, "grads": grads, "optimizer": state, "total": params + grads + state}
    _, opt = one_step(comm, algorithm, param_dtype=torch.bfloat16)
    return opt.memory_bytes()


def formula(algorithm: str, psi: int, n: int) -> float:
    return {"ddp": 16 * psi, "zero1": (4 + 12 / n) * psi, "zero2": (2 + 14 / n) * psi, "zero3": 16 * psi / n}[algorithm]


def case(comm: Any, algorithm: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        psi = sum(p.numel() for p in make_model().parameters())
        got = measured(comm, algorithm)
        expected = formula(algorithm, psi, comm.size)
        error = abs(got["total"] - expected) / expected
        return {"ok": error <= TOLERANCE, "bytes": got, "formula": expected, "relative_error": error, "psi": psi}

    return run


def main() -> None:
    comm = world()
    run_cases(comm, [(a, case(comm, a)) for a in ("ddp", "zero1", "zero2", "zero3")])


if __name__ == "__main__":
    main()
