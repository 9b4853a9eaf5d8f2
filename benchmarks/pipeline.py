"""Pipeline parallelism: training samples/s of pycomm's GPipe, 1F1B and interleaved 1F1B (algorithms.Pipeline;
interleaved with 2 chunks per stage, no torch peer) against torch.distributed.pipelining's ScheduleGPipe /
Schedule1F1B over gloo (same MLP, same stages, same micro-batches, CPU, fp32), and the bubble pycomm
measured (in slots from the executed order, and from wall-clock compute time) against (p - 1)/(m + p - 1)
((p - 1)/(2 m + p - 1) interleaved). Writes results/pipeline.json, a table and a PNG.

    python -m benchmarks.pipeline [--stages 2 4] [--layers 8 --width 512 --batch 64 --microbatches 8] [--repeats 7]
    python -m benchmarks.pipeline --quick      # 8 layers, 128 wide, batch 32: a smoke run in seconds

The inference half (tokens/s and time to first token against a single process and a no-cache star) is
benchmarks/pipeline_inference.py's; `inference_section` folds its latest results/pipeline_inference.json
into this file's JSON and table, so one document holds both. Goal: >= 1.0x torch pipelining."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.algorithms import free_port
from benchmarks.harness import RESULTS, plot_if_matplotlib, save, table
from benchmarks.run_ranks import mpirun

CASES = ["pycomm_gpipe", "pycomm_1f1b", "pycomm_interleaved_1f1b", "torch_gpipe", "torch_1f1b"]


def launch(p: int, a: argparse.Namespace) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="bench-pipeline-")) / "result.json"
    mpirun(
        p,
        "benchmarks.workers.pipeline_train",
        str(out),
        str(a.layers),
        str(a.width),
        str(a.batch),
        str(a.microbatches),
        str(a.repeats),
        *a.cases,
        timeout=1800,
        env={"BENCH_PORT": str(free_port())},
    )
    return json.loads(out.read_text())


def rows_of(p: int, m: int, result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for case, r in result.items():
        peer = result.get(case.replace("pycomm_", "torch_"), {}).get("samples_per_s")
        row = {"stages": p, "microbatches": m, "case": case, **r}
        if case.startswith("pycomm") and peer:
            row["speed_vs_torch"] = r["samples_per_s"] / peer
        rows.append(row)
    return rows


def inference_section(results_dir: Path | None) -> dict[str, Any] | None:
    """The hook for the inference figures: the latest results of benchmarks/pipeline_inference.py (its own
    JSON, written by that benchmark) as they are, or None when it has not been run."""
    path = (Path(results_dir) if results_dir is not None else RESULTS) / "pipeline_inference.json"
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    return {"source": str(path), **{k: v for k, v in doc.items() if k != "benchmark"}}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's options; --quick shrinks the model and, unless --repeats is given, the repeats."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--layers", type=int, default=8, help="Linear+GELU pairs (2 x layers modules to split)")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each case (default 7; 5 with --quick)")
    ap.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    ap.add_argument("--quick", action="store_true", help="8 layers, 128 wide, batch 32, 5 repeats")
    ap.add_argument("--results-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.quick:
        a.layers, a.width, a.batch = 8, 128, 32
    if a.repeats is None:  # --quick's 5 must not override repeats the caller asked for
        a.repeats = 5 if a.quick else 7
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1 (timed runs of each case), got {a.repeats}")
    return a


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = parse(argv)
    rows = [row for p in a.stages for row in rows_of(p, a.microbatches, launch(p, a))]
    print(
        table(
            rows,
            [
                "stages",
                "microbatches",
                "case",
                "samples_per_s",
                "speed_vs_torch",
                "bubble_slots",
                "bubble_expected",
                "bubble_wall",
                "peak_live",
            ],
        )
    )
    inference = inference_section(a.results_dir)
    if inference is not None and isinstance(inference.get("rows"), list):
        print("inference (benchmarks/pipeline_inference.py):")
        print(table(inference["rows"], sorted({k for r in inference["rows"] for k in r})))

    def plot(ax: Any) -> None:
        for case in a.cases:
            ok = [r for r in rows if r["case"] == case]
            ax.plot([r["stages"] for r in ok], [r["samples_per_s"] for r in ok], "o-", label=case)
        ax.set_xlabel("pipeline stages (ranks)")
        ax.set_ylabel("training samples/s")
        ax.set_xticks(a.stages)
        ax.set_title(f"MLP {a.layers}x{a.width}, batch {a.batch}, {a.microbatches} micro-batches, CPU fp32")
        ax.legend()

    payload = {"config": vars(a) | {"results_dir": str(a.results_dir)}, "rows": rows, "inference": inference}
    print(save("pipeline", payload, plot_if_matplotlib(plot), results_dir=a.results_dir))
    return payload


if __name__ == "__main__":
    main()
