"""apps.plot on run directories in the exact format apps.metrics writes (Metrics, config.yaml from
apps/config/loading.py): titles name the algorithm, its options, ranks and model; bytes on a log axis with human
units; loss against bytes a step curve; no accuracy panel without accuracy; runs compared in one figure."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.axes import Axes

from apps import plot
from apps.config import loading
from apps.config.schema import Config, LoggingConfig
from apps.metrics import Metrics


def _write_run(
    root: Path,
    name: str,
    algorithm: str,
    options: dict,
    ranks: int,
    period: int | None,
    bytes_per_round: float,
    accuracy: bool = True,
    model: str = "mlp",
    steps: int = 40,
) -> Path:
    """A run directory as apps.train leaves it: config.yaml and Metrics' train/eval files. The
    algorithm communicates `bytes_per_round` every `period` steps (every step when period is None)."""
    cfg = Config(name=name, out_dir=str(root))
    cfg.model.name, cfg.algorithm.name, cfg.algorithm.options = model, algorithm, options
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(loading.dump(cfg))
    metrics = Metrics(run_dir, LoggingConfig(progress=False), 0, steps, 10, loading.to_dict(cfg), None)
    sent = 0.0
    for step in range(1, steps + 1):
        if period is None or step % period == 0:
            sent += bytes_per_round
        metrics.step(
            {
                "step": step,
                "epoch": 0,
                "segment": 0,
                "time": 0.5 * step,
                "loss": 2.0 / step**0.5,
                "lr": 0.1,
                "samples_per_s": 100.0,
                "tokens_per_s": None,
                "mfu": None,
                "comm_bytes": sent if algorithm != "none" else None,
                "comm_seconds": 0.01 * step,
                "H": period,
                "ranks": ranks if algorithm != "none" else None,
            }
        )
        if step % 10 == 0:
            metrics.eval(
                {
                    "step": step,
                    "epoch": 0,
                    "time": 0.5 * step,
                    "loss": 1.5 / step**0.5,
                    "accuracy": 1 - 1 / step if accuracy else None,
                }
            )
    metrics.close()
    return run_dir


def _axes(fig: plt.Figure) -> dict[str, Axes]:
    return {(ax.get_xlabel(), ax.get_ylabel()): ax for ax in fig.axes}


def test_single_run_figure_titles_scales_and_files(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path, "p", "plsgd", {"averaging_freq": 8, "codec": "int8"}, 2, 8, 4e5)
    fig = plot.figure([plot.load_run(run_dir)])
    title = fig.get_suptitle()
    assert title == "plsgd (H=8, codec int8): mlp on mnist, 2 ranks", title
    axes = _axes(fig)
    assert set(axes) == {
        ("optimizer step", "training loss (mean of 2 steps)"),
        ("wall time (s)", "training loss (mean of 2 steps)"),
        ("bytes sent per rank", "training loss"),
        ("optimizer step", "eval loss"),
        ("optimizer step", "eval accuracy"),
        ("wall time (s)", "eval accuracy"),
    }
    by_bytes = axes[("bytes sent per rank", "training loss")]
    assert by_bytes.get_xscale() == "log" and by_bytes.get_yscale() == "log"
    line = by_bytes.get_lines()[0]
    assert line.get_drawstyle() == "steps-post"
    assert list(line.get_xdata()) == [4e5 * k for k in range(1, 6)]  # one point per averaging, not per step
    fig.canvas.draw()
    lo, hi = by_bytes.get_xlim()
    labels = [t.get_text() for t in by_bytes.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
    assert labels and all(text.endswith(("kB", "MB")) for text in labels), labels
    assert not any("10^" in t.get_text() or "$" in t.get_text() for ax in fig.axes for t in ax.get_yticklabels())
    plt.close(fig)
    written = plot.plot_runs([run_dir], run_dir)
    assert run_dir / "training.png" in written and (run_dir / "loss_vs_bytes.png").stat().st_size > 0
    assert all(p.stat().st_size > 0 for p in written)


def test_no_accuracy_panel_for_a_model_without_accuracy(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path, "g", "mbsgd", {}, 4, None, 1e6, accuracy=False, model="gpt")
    fig = plot.figure([plot.load_run(run_dir)])
    assert not [ax for ax in fig.axes if "accuracy" in ax.get_ylabel()]
    assert len(fig.axes) == 4 and fig.get_suptitle() == "mbsgd: gpt on mnist, 4 ranks"
    plt.close(fig)
    names = {p.name for p in plot.plot_runs([run_dir], tmp_path / "out")}
    assert "accuracy_vs_step.png" not in names and "eval_loss_vs_step.png" in names


def test_runs_of_different_algorithms_share_one_figure(tmp_path: Path) -> None:
    dense = _write_run(tmp_path, "mb", "mbsgd", {}, 2, None, 2e6)
    local = _write_run(tmp_path, "pl", "plsgd", {"averaging_freq": 8}, 2, 8, 2e6)
    compressed = _write_run(tmp_path, "pl8", "plsgd", {"averaging_freq": 8, "codec": "int8"}, 2, 8, 5e5)
    fig = plot.figure([plot.load_run(d) for d in (dense, local, compressed)])
    assert fig.get_suptitle() == "mbsgd vs plsgd: mlp on mnist, 2 ranks"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["mbsgd", "plsgd (H=8)", "plsgd (H=8, codec int8)"]
    by_bytes = _axes(fig)[("bytes sent per rank", "training loss")]
    assert len(by_bytes.get_lines()) == 3
    lo, hi = by_bytes.get_xlim()  # a log axis spans 5e5 .. 8e7 bytes without squashing the smallest run
    assert math.log10(hi / lo) > 2
    plt.close(fig)
    proc_out = tmp_path / "compare"
    assert plot.main([str(dense), str(local), str(compressed), "--out", str(proc_out)]) == 0
    assert (proc_out / "training.png").stat().st_size > 0


def test_same_algorithm_runs_are_told_apart_and_bad_dirs_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    a = _write_run(tmp_path, "a", "plsgd", {"averaging_freq": 8}, 2, 8, 1e6)
    b = _write_run(tmp_path, "b", "plsgd", {"averaging_freq": 8}, 4, 8, 1e6)
    c = _write_run(tmp_path, "c", "plsgd", {"averaging_freq": 8}, 4, 8, 1e6)
    fig = plot.figure([plot.load_run(d) for d in (a, b, c)])
    assert fig.get_suptitle() == "plsgd, 3 runs: mlp on mnist"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "plsgd (H=8, 2 ranks)",
        "plsgd (H=8, 4 ranks) [b]",
        "plsgd (H=8, 4 ranks) [c]",
    ]
    plt.close(fig)
    assert plot.main([str(tmp_path / "missing")]) == 2
    assert "no train.csv in" in capsys.readouterr().err


def test_a_run_without_a_finite_loss_plots_nothing_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = _write_run(tmp_path, "nan", "plsgd", {"averaging_freq": 8}, 2, 8, 1e6, steps=5)
    text = (run_dir / "train.csv").read_text().splitlines()
    header = text[0].split(",")
    rows = [r.split(",") for r in text[1:]]
    for r in rows:
        r[header.index("loss")] = "nan"
    (run_dir / "train.csv").write_text("\n".join([text[0]] + [",".join(r) for r in rows]) + "\n")
    assert not (run_dir / "eval.csv").exists()  # 5 steps: no evaluation yet
    assert plot.plot_runs([run_dir], tmp_path / "out") == [] and not (tmp_path / "out").exists()
    assert plot.main([str(run_dir)]) == 2 and "no finite loss" in capsys.readouterr().err
