"""`python -m apps.plot RUN_DIR [RUN_DIR ...] [--out DIR]`: figures of one run, or of several runs
(e.g. different algorithms) compared in one figure: training loss against step, wall time and bytes
communicated, eval loss and accuracy against step and time. `python -m apps.plot TRACE.json [--out PNG]`:
the per-rank timeline of a trace written by pycomm.profile() or `apps.train --trace` (apps/plot_timeline.py).

Writes `training.png` (every panel that has data, titled with the algorithm, its options, the ranks
and the model read from each run's config.yaml and metrics) and one PNG per panel. Bytes are on a
log axis in decimal units (kB, MB, GB), so compressed runs are not squashed against the axis; loss
against bytes is a step curve (the loss between two communications), not one spike per step."""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apps import requirements
from apps.command_name import command_name

try:
    requirements.require("logging.plot", True)  # matplotlib, or the line that installs it
except requirements.MissingDependencyError as e:
    if __name__ == "__main__":
        raise SystemExit(f"python -m apps.plot: {e}") from None
    raise

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter  # noqa: E402

from apps.plot_axes import bytes_axis, log_axis, plain_number, time_unit  # noqa: E402  (bytes_axis is re-exported)

Columns = dict[str, list[float]]


def read_csv(path: Path) -> Columns:
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns: Columns = {}
    for key in rows[0] if rows else {}:
        try:
            columns[key] = [float(r[key]) if r[key] not in ("", None) else float("nan") for r in rows]
        except ValueError:
            continue  # non-numeric column
    return columns


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


@dataclass
class RunData:
    """One run directory of apps.train: its metrics and its resolved config."""

    path: Path
    train: Columns
    eval: Columns
    config: dict[str, Any]

    def section(self, key: str) -> dict[str, Any]:
        value = self.config.get(key)
        return value if isinstance(value, dict) else {}

    @property
    def algorithm(self) -> str:
        return str(self.section("algorithm").get("name", "?"))

    @property
    def model(self) -> str:
        model, data = self.section("model").get("name"), self.section("data").get("name")
        return f"{model} on {data}" if model and data else str(model or data or "")

    @property
    def ranks(self) -> int | None:
        ranks = _finite(self.train.get("ranks", []))
        return int(ranks[-1]) if ranks else (1 if self.algorithm == "none" else None)

    def options(self) -> list[str]:
        """The options a reader compares by: the averaging period H (a range when adaptive) and the codec."""
        out = []
        periods = sorted(set(_finite(self.train.get("H", []))))
        if periods:
            out.append(f"H={periods[0]:g}" if len(periods) == 1 else f"H={periods[0]:g}–{periods[-1]:g}")
        codec = self.section("algorithm").get("options", {}).get("codec")
        if codec:
            out.append(f"codec {codec}")
        return out


def load_run(path: Path) -> RunData:
    path = Path(path)
    train = read_csv(path / "train.csv")
    if not train:
        raise FileNotFoundError(f"no train.csv in {path} (is it a run directory of apps.train?)")
    config_path = path / "config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.exists() else {}
    return RunData(path, train, read_csv(path / "eval.csv"), config if isinstance(config, dict) else {})


# -- labels -------------------------------------------------------------------------------------------


def _ranks_text(ranks: int | None) -> str:
    return "" if ranks is None else f"{ranks} rank" + ("s" if ranks != 1 else "")


def run_label(run: RunData, with_ranks: bool = False, with_model: bool = False) -> str:
    """`plsgd (H=8, codec int8)`, plus the ranks and the model when the compared runs differ in them."""
    name = "no algorithm" if run.algorithm == "none" else run.algorithm
    details = run.options() + ([_ranks_text(run.ranks)] if with_ranks and run.ranks else [])
    label = f"{name} ({', '.join(details)})" if details else name
    return f"{label} · {run.model}" if with_model and run.model else label


def labels_and_title(runs: list[RunData]) -> tuple[list[str], str]:
    """One legend label per run and the figure title; what all runs share goes into the title."""
    same_ranks = len({r.ranks for r in runs}) == 1
    same_model = len({r.model for r in runs}) == 1
    plain = [run_label(r, not same_ranks, not same_model) for r in runs]
    # identical labels (same algorithm and options): name the run directory too
    labels = [f"{label} [{r.path.name}]" if plain.count(label) > 1 else label for label, r in zip(plain, runs)]
    shared = [runs[0].model if same_model else "", _ranks_text(runs[0].ranks) if same_ranks else ""]
    shared_text = ", ".join(s for s in shared if s)
    if len(runs) == 1:
        head = labels[0]
    else:
        algorithms = list(dict.fromkeys(r.algorithm for r in runs))
        head = " vs ".join(algorithms) if len(algorithms) > 1 else f"{algorithms[0]}, {len(runs)} runs"
    return labels, f"{head}: {shared_text}" if shared_text else head


def _smooth(values: list[float], window: int) -> list[float]:
    out, acc, count = [], 0.0, 0
    for i, v in enumerate(values):
        acc, count = acc + v, count + 1
        if i >= window:
            acc, count = acc - values[i - window], count - 1
        out.append(acc / count)
    return out


def smoothing_window(steps: int) -> int:
    """Steps the training loss is averaged over: per-batch losses are too noisy to compare runs by."""
    return max(1, min(steps // 15, 100))


def _between_communications(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """(bytes sent so far, mean loss until the next communication), one point per communication;
    steps before the first one (0 bytes: off a log axis) are left out."""
    points: list[tuple[float, list[float]]] = []
    for x, y in zip(xs, ys):
        if not (math.isfinite(x) and math.isfinite(y)) or x <= 0:
            continue
        if points and points[-1][0] == x:
            points[-1][1].append(y)
        else:
            points.append((x, [y]))
    return [x for x, _ in points], [sum(ys) / len(ys) for _, ys in points]


# -- panels -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    file: str
    source: str  # "train" or "eval"
    x: str
    y: str
    xlabel: str
    ylabel: str


PANELS = [
    Panel("loss_vs_step.png", "train", "step", "loss", "optimizer step", "training loss"),
    Panel("loss_vs_time.png", "train", "time", "loss", "wall time", "training loss"),
    Panel("loss_vs_bytes.png", "train", "comm_bytes", "loss", "bytes sent per rank", "training loss"),
    Panel("eval_loss_vs_step.png", "eval", "step", "loss", "optimizer step", "eval loss"),
    Panel("accuracy_vs_step.png", "eval", "step", "accuracy", "optimizer step", "eval accuracy"),
    Panel("accuracy_vs_time.png", "eval", "time", "accuracy", "wall time", "eval accuracy"),
]


def _series(panel: Panel, run: RunData, window: int = 1) -> tuple[list[float], list[float]] | None:
    """The (x, y) a run draws on a panel, training loss averaged over `window` steps; None when it
    has no such data (so no empty panels)."""
    columns = getattr(run, panel.source)
    xs, ys = columns.get(panel.x, []), columns.get(panel.y, [])
    pairs = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    if panel.x == "comm_bytes":
        pairs = [(x, y) for x, y in pairs if x > 0]
    if not pairs:
        return None
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    if panel.source == "train":
        ys = _smooth(ys, window)
    if panel.x == "comm_bytes":
        xs, ys = _between_communications(xs, ys)
    return xs, ys


def draw(ax: Axes, panel: Panel, runs: list[RunData], labels: list[str]) -> None:
    """Draw one panel for every run that has its data (colours follow the run's index)."""
    longest = max(len(r.train.get(panel.y, [])) for r in runs)
    window = smoothing_window(longest) if panel.source == "train" else 1
    drawn = [(i, s) for i, r in enumerate(runs) if (s := _series(panel, r, window)) is not None]
    all_x = [x for _, (xs, _) in drawn for x in xs]
    all_y = [y for _, (_, ys) in drawn for y in ys]
    unit, scale = time_unit(max(all_x)) if panel.x == "time" else ("", 1.0)
    for i, (xs, ys) in drawn:
        style: dict[str, Any] = {"color": f"C{i % 10}", "label": labels[i], "linewidth": 1.4}
        if panel.x == "comm_bytes":
            style["drawstyle"] = "steps-post"
        elif panel.source == "eval":
            style.update(marker="o", markersize=3)
        ax.plot([x / scale for x in xs], ys, **style)
    ax.set_xlabel(f"{panel.xlabel} ({unit})" if unit else panel.xlabel)
    ax.set_ylabel(
        f"{panel.ylabel} (mean of {window} steps)" if window > 1 and panel.x != "comm_bytes" else panel.ylabel
    )
    if panel.x == "comm_bytes":
        ax.set_xscale("log")
        bytes_axis(ax.xaxis, all_x)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=panel.x == "step"))
        ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    if panel.y == "accuracy":
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0 if max(all_y) - min(all_y) > 0.05 else 1))
    elif panel.y == "loss" and min(all_y) > 0:
        ax.set_yscale("log")
        log_axis(ax.yaxis, all_y, plain_number)
    ax.grid(alpha=0.3, which="major")
    ax.spines[["top", "right"]].set_visible(False)


def panels_with_data(runs: list[RunData]) -> list[Panel]:
    return [p for p in PANELS if any(_series(p, r) is not None for r in runs)]


def figure(runs: list[RunData], panels: list[Panel] | None = None) -> Figure:
    """All panels with data in one figure, titled with what the runs share, a legend entry per run."""
    panels = panels_with_data(runs) if panels is None else panels
    if not panels:
        raise ValueError(f"nothing to plot: no run of {[str(r.path) for r in runs]} has a finite training loss")
    labels, title = labels_and_title(runs)
    ncols = 1 if len(panels) == 1 else 2 if len(panels) in (2, 4) else 3
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows + 0.6), layout="constrained", squeeze=False
    )
    for ax, panel in zip(axes.flat, panels):
        draw(ax, panel, runs, labels)
    for ax in list(axes.flat)[len(panels) :]:
        fig.delaxes(ax)
    fig.suptitle(title, fontsize=12)
    if len(runs) > 1:
        handles = {label: h for ax in fig.axes for h, label in zip(*ax.get_legend_handles_labels())}
        fig.legend(
            handles.values(), handles.keys(), loc="outside lower center", ncol=min(len(handles), ncols), frameon=False
        )
    return fig


def plot_runs(run_dirs: list[Path], out: Path) -> list[Path]:
    """training.png (every panel with data) and one PNG per panel; returns the files written, none
    when no run has a finite loss (a diverged run still ends cleanly)."""
    runs = [load_run(Path(d)) for d in run_dirs]
    panels = panels_with_data(runs)
    written = []
    for name, chosen in [("training.png", panels)] + [(p.file, [p]) for p in panels] if panels else []:
        out.mkdir(parents=True, exist_ok=True)
        fig = figure(runs, chosen)
        fig.savefig(out / name, dpi=150)
        plt.close(fig)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=command_name("apps.plot", "pycomm-plot"), description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (runs/<name>), compared in one figure")
    p.add_argument(
        "--out",
        type=Path,
        help="where the PNGs go (default: the run directory, or "
        "<parent of the first run>/compare when several runs are given)",
    )
    args = p.parse_args(argv)
    if len(args.runs) == 1 and args.runs[0].suffix == ".json" and args.runs[0].is_file():
        return _timeline(args.runs[0], args.out)
    out = args.out or (args.runs[0] if len(args.runs) == 1 else args.runs[0].parent / "compare")
    try:
        written = plot_runs(args.runs, out)
    except (FileNotFoundError, ValueError, yaml.YAMLError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not written:
        print(f"error: nothing to plot: no finite loss in {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def _timeline(trace: Path, out: Path | None) -> int:
    import json

    from apps.plot_timeline import draw_timeline

    try:
        events = json.loads(trace.read_text())["traceEvents"]
        png = draw_timeline(events, out or trace.with_suffix(".png"), title=trace.name)
    except (ValueError, KeyError, TypeError) as e:
        print(f"error: {trace} is not a trace pycomm.profile() wrote: {e}", file=sys.stderr)
        return 2
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
