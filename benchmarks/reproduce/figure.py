"""The figures: per task, the eval metric against bytes sent per rank for every method (mean over seeds,
shaded min-max band, the final point with its spread), one colour per method, int8 dashed; and, as a
by-product, apps.plot's training-curve comparison of the first seed's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from apps.plot import bytes_axis, plot_runs  # noqa: E402
from benchmarks.reproduce.grid import METHODS, Task  # noqa: E402

_COLOUR = {m.key: f"C{i % 10}" for i, m in enumerate(METHODS)}


def draw_task(ax: Any, task: Task, rows: list[dict[str, Any]], ranks: int, steps: int) -> None:
    drawn = [r for r in rows if r["task"] == task.key and r["seeds_done"]]
    all_bytes = []
    for r in drawn:
        curve = r["curve"]
        xs = [p["bytes"] for p in curve]
        all_bytes += xs
        colour, dashed = _COLOUR[r["method"]], r["codec"] != "fp32"
        scale = 100.0 if task.metric == "accuracy" else 1.0
        ax.plot(
            xs,
            [scale * p["mean"] for p in curve],
            color=colour,
            ls="--" if dashed else "-",
            lw=1.2,
            label=f"{r['label']} ({r['seeds_done']} seed{'s' if r['seeds_done'] > 1 else ''})",
        )
        if r["seeds_done"] > 1:
            ax.fill_between(
                xs, [scale * p["min"] for p in curve], [scale * p["max"] for p in curve], color=colour, alpha=0.12, lw=0
            )
        final = r[task.metric]
        ax.errorbar(
            [r["bytes"]["mean"]],
            [scale * final["mean"]],
            yerr=[[scale * (final["mean"] - final["min"])], [scale * (final["max"] - final["mean"])]],
            color=colour,
            marker="s" if dashed else "o",
            ms=4,
            capsize=2,
        )
    if task.metric == "accuracy":
        ax.axhline(100 * task.target, color="grey", lw=0.6, ls=":")
        ax.set_ylabel("eval accuracy (%)")
    else:
        ax.axhline(task.target, color="grey", lw=0.6, ls=":")
        ax.set_ylabel("eval loss")
    ax.set_xscale("log")
    if all_bytes:
        bytes_axis(ax.xaxis, [b for b in all_bytes if b > 0])
    ax.set_xlabel("bytes sent per rank (rank 0's comm_stats)")
    ax.set_title(
        f"{task.title}\n{ranks} ranks, {steps} steps per run; marker: final eval (min-max over seeds)", fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def zoom_to_finals(ax: Any, task: Task, rows: list[dict[str, Any]]) -> None:
    """Limit the y axis to the range of the final points (early evaluations would squash them)."""
    finals = [
        v
        for r in rows
        if r["task"] == task.key and r["seeds_done"]
        for v in (r[task.metric]["min"], r[task.metric]["max"])
    ]
    if not finals:
        return
    scale = 100.0 if task.metric == "accuracy" else 1.0
    lo, hi = scale * min(finals + [task.target]), scale * max(finals + [task.target])
    pad = 0.6 * (hi - lo) + 1e-6
    ax.set_ylim(lo - pad, min(hi + pad, 100.0) if task.metric == "accuracy" else hi + pad)


def save_task_figure(path: Path, task: Task, rows: list[dict[str, Any]], ranks: int, steps: int) -> Path:
    fig, ax = plt.subplots(figsize=(9, 6), layout="constrained")
    draw_task(ax, task, rows, ranks, steps)
    zoom_to_finals(ax, task, rows)
    ax.legend(fontsize=7, ncol=2, loc="best")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=130)
    plt.close(fig)
    tmp.replace(path)
    return path


def training_curves(run_dirs: list[Path], out: Path) -> list[Path]:
    """apps.plot's comparison (training loss against step, time and bytes; eval curves) of `run_dirs`."""
    return plot_runs(run_dirs, out) if run_dirs else []
