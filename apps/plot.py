"""`python -m apps.plot RUN_DIR [RUN_DIR ...] [--out DIR]`: PNGs comparing runs — training loss and
eval accuracy against step, training loss against wall time and against bytes communicated."""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_csv(path: Path) -> dict[str, list[float]]:
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns: dict[str, list[float]] = {}
    for key in (rows[0] if rows else {}):
        try:
            columns[key] = [float(r[key]) if r[key] not in ("", None) else float("nan") for r in rows]
        except ValueError:
            continue  # non-numeric column
    return columns


def _smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


# (file name, source file, x column, y column, x label, y label)
FIGURES = [
    ("loss_vs_step.png", "train", "step", "loss", "optimizer step", "training loss (smoothed)"),
    ("loss_vs_time.png", "train", "time", "loss", "wall time (s)", "training loss (smoothed)"),
    ("loss_vs_bytes.png", "train", "comm_bytes", "loss", "bytes communicated per rank", "training loss (smoothed)"),
    ("eval_loss_vs_step.png", "eval", "step", "loss", "optimizer step", "eval loss"),
    ("accuracy_vs_step.png", "eval", "step", "accuracy", "optimizer step", "eval accuracy"),
    ("accuracy_vs_time.png", "eval", "time", "accuracy", "wall time (s)", "eval accuracy"),
]


def plot_runs(run_dirs: list[Path], out: Path) -> list[Path]:
    """One PNG per figure whose columns some run has; returns the files written."""
    runs = {Path(d): {"train": read_csv(Path(d) / "train.csv"), "eval": read_csv(Path(d) / "eval.csv")}
            for d in run_dirs}
    missing = [str(d) for d, r in runs.items() if not r["train"]]
    if missing:
        raise FileNotFoundError(f"no train.csv in {', '.join(missing)} (is it a run directory of apps.train?)")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, source, x, y, xlabel, ylabel in FIGURES:
        series = [(d.name, r[source][x], r[source][y]) for d, r in runs.items()
                  if x in r[source] and y in r[source] and any(v == v for v in r[source][x])]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, xs, ys in series:
            if source == "train":
                ys = _smooth(ys, max(1, len(ys) // 50))
            ax.plot(xs, ys, label=label, marker="o" if source == "eval" else None, markersize=3)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if y == "loss" and source == "train":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m apps.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (runs/<name>)")
    p.add_argument("--out", type=Path, help="where the PNGs go (default: the first run directory, or "
                                            "runs/compare when several runs are given)")
    args = p.parse_args(argv)
    out = args.out or (args.runs[0] if len(args.runs) == 1 else args.runs[0].parent / "compare")
    try:
        written = plot_runs(args.runs, out)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
