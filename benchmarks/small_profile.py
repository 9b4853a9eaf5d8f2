"""Where a small collective's time goes under a plain `mpirun -n 2`, against mpi4py's, by timed splits
(the cases below 0.9x in results/collectives_plain.json): each case is timed as

- `pycomm` / `mpi4py`: the op on the 2-rank world, as the plain section times it;
- `pycomm_matching`: the same kind of op with no data: op matching's round alone (for a broadcast, the
  root's one-way message);
- `pycomm_local` / `mpi4py_local`: the op on a 1-rank communicator (pycomm's own split, MPI's
  COMM_SELF): the fixed cost of a call (the Python binding, the core's op, local copies), no wire;

in both call patterns (isolated: a barrier, then one call; back to back: calls batched), every case
interleaved with the others in the same rounds (benchmarks.collectives_timing's `isolated` and `timed`).
Writes results/<name>.json and prints medians in microseconds.

    python -m benchmarks.small_profile [--name small_profile] [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness import environment
from benchmarks.run_ranks import ROOT, check, mpirun_argv, worker_env

KIB, MIB = 1 << 10, 1 << 20
# (op, bytes of the whole buffer): the worst cases of the plain section on 2 ranks
CASES = (
    ("broadcast", 4 * KIB),
    ("broadcast", 16 * KIB),
    ("broadcast", 64 * KIB),
    ("allgather", 64 * KIB),
    ("allgather", 256 * KIB),
    ("allgather", MIB),
    ("reduce_scatter", 4 * KIB),
    ("reduce_scatter", 16 * KIB),
    ("reduce_scatter", 64 * KIB),
    ("allreduce", 64 * KIB),
)
SPLITS = ("pycomm", "mpi4py", "pycomm_matching", "pycomm_local", "mpi4py_local")


def _calls(pc: Any, mpi: Any, op: str, nbytes: int) -> Callable[[], Any]:
    """The op on a whole buffer of `nbytes` (shards of nbytes / size) through pycomm communicator `pc`
    or, where `pc` is None, mpi4py communicator `mpi`."""
    import torch
    from mpi4py import MPI

    import pycomm

    n = (pc or mpi).size
    full, shard = torch.zeros(nbytes // 4 // n * n), torch.zeros(nbytes // 4 // n)
    a, h = full.numpy(), shard.numpy()
    if pc is not None:
        return {
            "allreduce": lambda: pc.allreduce(full, op=pycomm.SUM),
            "broadcast": lambda: pc.broadcast(full, root=0),
            "allgather": lambda: pc.allgather(full, shard),
            "reduce_scatter": lambda: pc.reduce_scatter(shard, full, op=pycomm.SUM),
        }[op]
    return {
        "allreduce": lambda: mpi.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM),
        "broadcast": lambda: mpi.Bcast(a, root=0),
        "allgather": lambda: mpi.Allgather(h, a),
        "reduce_scatter": lambda: mpi.Reduce_scatter_block(a, h, op=MPI.SUM),
    }[op]


def rank_main(out: str, calls: int) -> None:
    import torch
    from mpi4py import MPI

    import pycomm
    from benchmarks.collectives_timing import isolated, timed

    torch.set_num_threads(1)
    world = pycomm.init()
    alone = world.split(world.rank)  # a 1-rank communicator: no wire
    fns: dict[str, Callable[[], Any]] = {}
    for op, nbytes in CASES:
        fns[f"{op}/{nbytes}/pycomm"] = _calls(world, None, op, nbytes)
        fns[f"{op}/{nbytes}/mpi4py"] = _calls(None, MPI.COMM_WORLD, op, nbytes)
        fns[f"{op}/{nbytes}/pycomm_matching"] = _calls(world, None, op, 0)
        fns[f"{op}/{nbytes}/pycomm_local"] = _calls(alone, None, op, nbytes)
        fns[f"{op}/{nbytes}/mpi4py_local"] = _calls(None, MPI.COMM_SELF, op, nbytes)
    got = {
        "isolated": isolated(fns, MPI.COMM_WORLD, calls, budget_s=60.0),
        "back_to_back": timed(fns, MPI.COMM_WORLD, 9),
    }
    if world.rank == 0:
        rows = [
            {"op": op, "bytes": int(b), "split": split, "pattern": pattern, "seconds": tm}
            for pattern, times in got.items()
            for key, tm in times.items()
            for op, b, split in [key.split("/")]
        ]
        Path(out).write_text(json.dumps(rows))
    pycomm.finalize()


def table(rows: list[dict]) -> str:
    """Medians in us, one line per case and pattern."""
    med = {(r["op"], r["bytes"], r["pattern"], r["split"]): r["seconds"]["median"] * 1e6 for r in rows}
    lines = ["| pattern | op | bytes | " + " | ".join(SPLITS) + " | mpi4py / pycomm |", "|" + " --- |" * 9]
    for pattern in ("isolated", "back_to_back"):
        for op, nbytes in CASES:
            v = [med[(op, nbytes, pattern, s)] for s in SPLITS]
            cells = " | ".join(f"{x:.1f}" for x in v)
            lines.append(f"| {pattern} | {op} | {nbytes // KIB} KiB | {cells} | {v[1] / v[0]:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="small_profile")
    ap.add_argument("--calls", type=int, default=200, help="isolated samples per case")
    ap.add_argument("--rank-out", help=argparse.SUPPRESS)  # set on the ranks
    args = ap.parse_args(argv)
    if args.rank_out:
        rank_main(args.rank_out, args.calls)
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        argv_ = [*mpirun_argv(2, bind_to_none=False), sys.executable, "-m", "benchmarks.small_profile"]
        argv_ += ["--calls", str(args.calls), "--rank-out", str(out)]
        proc = subprocess.run(
            argv_, cwd=ROOT, env=worker_env({"PYCOMM_TIMEOUT": "600"}), text=True, capture_output=True, timeout=900
        )
        check(proc, "small_profile")
        rows = json.loads(out.read_text())
    result = {"environment": environment(), "rows": rows}
    (ROOT / "benchmarks" / "results" / f"{args.name}.json").write_text(json.dumps(result, indent=1))
    print(table(rows))
    return result


if __name__ == "__main__":
    main()
