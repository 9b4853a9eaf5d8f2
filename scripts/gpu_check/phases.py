"""The phases of the GPU check, most valuable first: a later phase is the first to be skipped when the budget
runs out. Pytest phases select the tests marked `gpu` in their paths (scripts/gpu_check.sh --dry-run checks
that every file using the marker is in some phase, and that each phase collects tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Phase needs: the GPU build (every phase) and an MPI launcher (the carried Open MPI wheel).
BUILD, MPI = "build", "mpi"


@dataclass(frozen=True)
class Phase:
    name: str
    covers: str  # one line: what passing it proves
    tests: tuple[str, ...] = ()  # pytest paths (run with -m gpu), or
    command: tuple[str, ...] = ()  # a plain command; "{python}" and "{results}" are filled in
    limit_s: int = 120  # time limit (less when less of the budget is left)
    floor_s: int = 20  # skipped when less than this is left of the budget
    maxfail: int | None = None  # pytest --maxfail: stop a phase that fails everywhere early
    test_limit_s: int = 240  # pytest-timeout: a test hung past it fails alone
    outputs: tuple[str, ...] = ()  # files the command must write into the results folder
    needs: frozenset[str] = field(default_factory=lambda: frozenset({BUILD}))


PHASES: tuple[Phase, ...] = (
    Phase(
        "kernels",
        "every kernel on CUDA against its reference and the CPU's bytes (tests/kernels); the "
        "module keeps any C++ runtime linked into it private",
        tests=("tests/kernels", "tests/infra/test_module_symbols.py"),
        limit_s=100,
        floor_s=20,
        maxfail=40,
    ),
    Phase(
        "nccl",
        "NCCL on one rank: every op and dtype, async Work, stream semantics without host sync, "
        "abort, watchdog timeout, bad tensors, ncclCommSplit; stream order of pooled buffers and local p2p",
        tests=("tests/comm/test_nccl.py", "tests/comm/test_gpu_streams.py"),
        limit_s=150,
        floor_s=30,
        maxfail=15,
        test_limit_s=60,
    ),
    Phase(
        "mpi_cuda",
        "MPI with CUDA buffers on 2 ranks sharing the GPU (pinned staging): the collectives "
        "suite, allreduce_quantized on the GPU codec kernels, CPU == GPU codec bytes",
        tests=("tests/comm/test_mpi_cuda.py",),
        limit_s=150,
        floor_s=40,
        needs=frozenset({BUILD, MPI}),
    ),
    Phase(
        "train",
        "python -m apps.train on the GPU: GPT on 1 rank (tok/s, MFU), plsgd and lapsgd on 2 ranks "
        "over MPI with CUDA tensors, LAP's CUDA-IPC Hogwild workers",
        tests=("tests/apps/test_train_gpu.py", "tests/algorithms/test_lap_workers.py"),
        limit_s=200,
        floor_s=45,
        needs=frozenset({BUILD, MPI}),
    ),
    Phase(
        "bench",
        "python -m benchmarks.kernels on the GPU: GB/s against a device-to-device copy and the torch "
        "composition (kernels_gpu.json + PNG)",
        command=(
            "{python}",
            "-m",
            "benchmarks.kernels",
            "--device",
            "cuda",
            "--sizes",
            "4,16,64",
            "--repeats",
            "5",
            "--out",
            "{results}",
        ),
        limit_s=100,
        floor_s=25,
        outputs=("kernels_gpu.json", "kernels_gpu.png"),
    ),
    Phase(
        "nvtx",
        "NVTX ranges of every collective and kernel, with their bytes, through our injection library",
        tests=("tests/infra/test_nvtx_ranges.py",),
        limit_s=60,
        floor_s=15,
    ),
)


def by_name(names: str | None) -> tuple[Phase, ...]:
    """The phases named in a comma-separated list (all when None), in PHASES' order."""
    if names is None:
        return PHASES
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = sorted(set(wanted) - {p.name for p in PHASES})
    if unknown:
        raise ValueError(f"unknown phase(s) {', '.join(unknown)}; expected some of {', '.join(p.name for p in PHASES)}")
    return tuple(p for p in PHASES if p.name in wanted)
