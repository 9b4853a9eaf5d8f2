"""What benchmarks/collectives.py, its goals (collectives_goals.py) and its plots (collectives_plots.py)
share: the sections, the load labels and sizes, and mpi4py's time over pycomm's."""

from __future__ import annotations

SECTIONS = (
    "busbw",
    "fusion",
    "quantized",
    "shards",
    "quantized_shaped",
    "small",
    "small_busy",
    "small_hugepages",
    "plain",
    "eager",
)
SMALL_SECTIONS = ("small", "small_busy", "small_hugepages")
HUGEPAGES_LOAD = "idle, huge pages"
PAIRED_LOAD = "idle, 4 KiB pages beside huge"  # small_hugepages' own 4 KiB rows: only for hugepage_speedup
SHAPED_RATE = "10gbit"  # our users' CPU clusters and cross-node links run at 10-25 Gbit/s
SHAPED_BYTES_PER_S = 10e9 / 8
KIB, MIB = 1 << 10, 1 << 20
BUSY_SAMPLE_S = 0.1
PLAIN_LOAD = "plain mpirun"
PATTERNS = ("isolated", "back_to_back")
# plain's sizes: every 2x around the eager limit (where op matching carries the data), then every 4x
# plain's sizes: every 2x around the eager limit (where op matching carries the data), then every 4x
PLAIN_SIZES = (4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
PLAIN_QUICK_SIZES = (4 * KIB, 64 * KIB)
EAGER_LIMITS = (4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB)  # PYCOMM_EAGER_BYTES values the eager section tries

EAGER_OPS = ("broadcast", "allgather", "reduce_scatter")  # what PYCOMM_EAGER_BYTES decides for


def mpi4py_ratios(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, float]:
    """mpi4py's median time over pycomm's, keyed by `keys` of the pycomm row (every other field alike)."""
    by = {(*(r[k] for k in keys), r["peer"]): r["seconds"]["median"] for r in rows}
    return {k[:-1]: by[(*k[:-1], "mpi4py")] / sec for k, sec in by.items() if k[-1] == "pycomm"}
