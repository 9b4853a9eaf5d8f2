"""ZeRO against torch DDP and FSDP2 (gloo, CPU) and pycomm mbsgd on the GPT: samples/s and bytes of
parameters + gradients + optimizer state per rank after a step (counted from live tensors, not RSS),
on 2 and 4 ranks, fp32. Writes results/zero.json, a table and a PNG (bytes per rank by case).

    python -m benchmarks.zero [--steps 5] [--ranks 2 4] [--n-layer 6 --n-embd 384 --block 256]   # the GPT config
    python -m benchmarks.zero --quick       # 2 layers, 128 wide, context 64: a smoke run in seconds
    python -m benchmarks.zero --replot      # zero.png again from zero.json

Goals (issue 13): zero3 bytes per rank <= (1/N + 10%) of DDP's; samples/s >= FSDP2's at the same stage.
Not measured here: peak memory during backward (transient full gradients and communication buffers)."""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness import RESULTS, draw, load, save, table
from benchmarks.algorithms import free_port
from benchmarks.run_ranks import mpirun

CASES = ["ddp", "fsdp2", "mbsgd", "zero1", "zero2", "zero3"]


def launch(n: int, steps: int, n_layer: int, n_embd: int, block: int, cases: list[str]) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="bench-zero-")) / "result.json"
    mpirun(n, "benchmarks.workers.zero_run", str(out), str(steps), str(n_layer), str(n_embd), str(block), *cases,
           timeout=1800, env={"BENCH_PORT": str(free_port())})
    return json.loads(out.read_text())


def rows_of(n: int, result: dict[str, Any]) -> list[dict[str, Any]]:
    ddp = result.get("ddp", {}).get("state_bytes")
    fsdp = result.get("fsdp2", {}).get("samples_per_s")
    rows = []
    for case, r in result.items():
        row = {"ranks": n, "case": case, **r}
        if "state_bytes" in r and ddp:
            row["bytes_vs_ddp"] = r["state_bytes"] / ddp
        if "samples_per_s" in r and fsdp:
            row["speed_vs_fsdp2"] = r["samples_per_s"] / fsdp
        rows.append(row)
    return rows


def bytes_per_rank(rows: list[dict[str, Any]], ranks: list[int], title: str) -> Callable[[Any], None]:
    """The PNG: parameters + gradients + optimizer state per rank, bars by case, one colour per rank count,
    with DDP's bytes / N dotted (what full sharding reaches)."""
    def plot(ax: Any) -> None:
        cases = list(dict.fromkeys(r["case"] for r in rows if "state_bytes" in r))
        width = 0.8 / len(ranks)
        for j, n in enumerate(ranks):
            got = {r["case"]: r["state_bytes"] / 2 ** 20 for r in rows if r["ranks"] == n and "state_bytes" in r}
            xs = [i + (j - (len(ranks) - 1) / 2) * width for i in range(len(cases))]
            bars = ax.bar(xs, [got.get(c, 0.0) for c in cases], width, label=f"{n} ranks")
            if "ddp" in got:
                ax.axhline(got["ddp"] / n, color=bars.patches[0].get_facecolor(), ls=":", lw=1,
                           label=f"DDP / {n}")
        ax.set_xticks(range(len(cases)), cases)
        ax.set_ylabel("params + grads + optimizer state per rank (MiB)")
        ax.set_title(title)
        ax.legend()
    return plot


def replot(results_dir: Path | None = None) -> Path:
    """results/zero.png drawn again from results/zero.json (no measuring)."""
    doc = load("zero", results_dir)
    c = doc["config"]
    return draw((Path(results_dir) if results_dir else RESULTS) / "zero.png",
                bytes_per_rank(doc["rows"], c["ranks"], f"GPT {c['n_layer']}x{c['n_embd']}, context {c['block']}, "
                                                        "AdamW fp32"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    ap.add_argument("--quick", action="store_true", help="a small GPT (2 layers, 128 wide, context 64)")
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument("--replot", action="store_true", help="draw zero.png again from zero.json; no runs")
    a = ap.parse_args(argv)
    if a.replot:
        print(replot(a.results_dir))
        return
    if a.quick:
        a.n_layer, a.n_embd, a.block = 2, 128, 64
    rows = [row for n in a.ranks for row in rows_of(n, launch(n, a.steps, a.n_layer, a.n_embd, a.block, a.cases))]
    print(table(rows, ["ranks", "case", "samples_per_s", "speed_vs_fsdp2", "state_bytes", "bytes_vs_ddp", "error"]))

    try:
        import matplotlib  # noqa: F401
        drawer = bytes_per_rank(rows, a.ranks, f"GPT {a.n_layer}x{a.n_embd}, context {a.block}, AdamW fp32")
    except ImportError:
        drawer = None
    print(save("zero", {"config": vars(a) | {"results_dir": str(a.results_dir)}, "rows": rows}, drawer,
               results_dir=a.results_dir))


if __name__ == "__main__":
    main()
