"""`python -m benchmarks.reproduce [--quick] [--tasks mnist gpt] [--seeds 3] [--summarise-only]`: train the
grid (skipping finished runs), then write the JSON, the markdown table and one figure per task."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import RESULTS, save
from benchmarks.reproduce import figure, report, summary
from benchmarks.reproduce.grid import METHODS, REPO, SEEDS, TASKS, Variant, ranks, variants
from benchmarks.reproduce.runner import RunSpec, finished, run_all


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny budgets, 1 seed, a few methods, 2 ranks (a smoke test)")
    ap.add_argument("--tasks", nargs="+", choices=[t.key for t in TASKS], help="default: all")
    ap.add_argument("--seeds", type=int, help=f"seeds per variant (default {len(SEEDS)}; 1 with --quick)")
    ap.add_argument("--runs-dir", type=Path, help="where the runs go (default runs/reproduce[-quick])")
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    ap.add_argument("--name", help="results file stem (default reproduce, reproduce_quick with --quick)")
    ap.add_argument(
        "--data-dir", type=Path, help="holds tinyshakespeare/input.txt (default: the copy apps.train embeds)"
    )
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds one run may take")
    ap.add_argument("--summarise-only", action="store_true", help="train nothing; report the finished runs")
    args = ap.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        ap.error(f"--seeds must be >= 1, got {args.seeds}")
    args.seeds = args.seeds or (1 if args.quick else len(SEEDS))
    args.runs_dir = (args.runs_dir or REPO / "runs" / ("reproduce-quick" if args.quick else "reproduce")).resolve()
    args.name = args.name or ("reproduce_quick" if args.quick else "reproduce")
    return args


def run_order(specs: list[RunSpec]) -> list[RunSpec]:
    """Seed-major, fp32 before int8, the tasks interleaved method by method: an interrupted reproduction
    has the papers' comparisons (fp32) on both tasks first, then the codec, then more seeds."""
    method_index = {m.key: i for i, m in enumerate(METHODS)}
    task_index = {t.key: i for i, t in enumerate(TASKS)}
    return sorted(
        specs,
        key=lambda s: (
            s.seed,
            s.variant.codec is not None,
            method_index[s.variant.method.key],
            task_index[s.variant.task.key],
        ),
    )


def collect(grid: list[Variant], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One summary row per variant, from its finished runs."""
    rows = []
    for variant in grid:
        specs = [RunSpec(variant, seed, args.quick) for seed in range(args.seeds)]
        runs = [summary.read_run(s, args.runs_dir) for s in specs if finished(s, args.runs_dir)]
        rows.append(summary.summarise_variant(variant, runs, args.seeds))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    grid = variants(args.quick, tuple(args.tasks) if args.tasks else None)
    specs = run_order([RunSpec(v, seed, args.quick) for seed in range(args.seeds) for v in grid])
    errors = {} if args.summarise_only else run_all(specs, args.runs_dir, args.data_dir, args.timeout)
    rows = collect(grid, args)
    tasks = [t for t in TASKS if any(v.task is t for v in grid)]
    orderings = {
        "qsr_vs_constant_h": [o for t in tasks for o in summary.qsr_vs_constant_h(t, rows)],
        "lsgd_vs_easgd": [o for t in tasks if (o := summary.lsgd_vs_easgd(t, rows))],
    }
    missing = {
        s.directory(args.runs_dir).name: errors.get(s.directory(args.runs_dir).name, "not run")
        for s in specs
        if not finished(s, args.runs_dir)
    }
    budgets = {t.key: vars(t.quick if args.quick else t.full) for t in tasks}
    payload = {
        "quick": args.quick,
        "ranks": ranks(args.quick),
        "seeds": list(range(args.seeds)),
        "budgets": budgets,
        "targets": {t.key: {"metric": t.metric, "value": t.target} for t in tasks},
        "rows": rows,
        "orderings": orderings,
        "missing": missing,
        "runs_dir": str(args.runs_dir),
    }
    path = save(args.name, payload, results_dir=args.results_dir)
    doc = {**payload, "environment": json.loads(path.read_text())["environment"]}
    text = report.markdown(doc)
    (args.results_dir / f"{args.name}.md").write_text(text + "\n")
    for task in tasks:
        figure.save_task_figure(
            args.results_dir / f"{args.name}_{task.key}.png", task, rows, ranks(args.quick), budgets[task.key]["steps"]
        )
        seed0 = [RunSpec(v, 0, args.quick).directory(args.runs_dir) for v in grid if v.task is task]
        figure.training_curves([d for d in seed0 if (d / "train.csv").exists()], args.runs_dir / f"compare-{task.key}")
    print(text)
    print(f"wrote {path} (+ .md, {', '.join(f'_{t.key}.png' for t in tasks)})", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
