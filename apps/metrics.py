"""Per-step and per-evaluation metrics, written by rank 0: a plain-text progress line on the console,
CSV and JSONL files in the run directory, TensorBoard and W&B when installed and asked for."""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from apps import requirements
from apps.apps_settings import TTY_ENV
from apps.config.schema import LoggingConfig
from pycomm import settings

FILES = ("train.csv", "train.jsonl", "eval.csv", "eval.jsonl")


MESH_DIMS = ("pp", "dp", "dp_replicate", "dp_shard")  # comm_bytes_<dim>: where the bytes travelled


def algorithm_quantities(opt: Any, ranks: int, pipe: Any = None) -> dict[str, Any]:
    """What the algorithm reports: bytes/seconds communicated, H (current period), staleness, and the
    run's number of ranks (for plot titles: the run's, not the optimizer's communicator, which is one
    process's own where ranks run as independent processes). comm_bytes counts every byte this rank
    handed to communication (the algorithm's and, with pipeline stages, the activations, their
    gradients and the loss), comm_bytes_<dim> the part on each mesh dimension: pp (between stages), dp
    (a data-parallel method over all replicas of a stage), dp_shard (ZeRO's reduce-scatters and
    all-gathers), dp_replicate (across the replicas of a shard); comm_bytes_across_nodes the part on
    groups that span nodes."""
    out: dict[str, Any] = {
        "comm_bytes": None,
        "comm_seconds": None,
        "H": getattr(opt, "current_period", None),
        "ranks": ranks,
    }
    stats = opt.comm_stats() if hasattr(opt, "comm_stats") else {}
    parts = [s for s in (stats, pipe.comm_stats() if pipe is not None else None) if s and s.get("bytes") is not None]
    if parts:
        out["comm_bytes"] = sum(s["bytes"] for s in parts)
    if any("bytes_by_dim" in s for s in parts):
        for dim in MESH_DIMS:  # a part without a split by dimension communicates over dp
            out[f"comm_bytes_{dim}"] = sum(s.get("bytes_by_dim", {"dp": s["bytes"]}).get(dim, 0) for s in parts)
    if any("bytes_across_nodes" in s for s in parts):  # of comm_bytes, those on groups that span nodes
        out["comm_bytes_across_nodes"] = sum(s.get("bytes_across_nodes", 0) for s in parts)
    out["comm_seconds"] = stats.get("seconds")
    if "staleness" in stats:
        out["staleness"] = stats["staleness"]
    out.update(stats.get("step_metrics", {}))  # e.g. a parameter server's staleness and bytes of this step
    return out


def _truncate(path: Path, step: int) -> None:
    """Drop rows logged after `step` (they are trained again after a resume from an older checkpoint)."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    if path.suffix == ".jsonl":
        kept = [ln for ln in lines if ln.strip() and json.loads(ln)["step"] <= step]
    else:
        header = lines[:1]
        kept = header + [ln for ln in lines[1:] if ln.strip() and int(ln.split(",", 1)[0]) <= step]
    path.write_text("".join(kept))


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TB"


def _fmt_time(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """`step 120/375 [#####.....] 32% ep 1 loss 0.2345 ...`, redrawn in place on a terminal."""

    def __init__(self, total: int, first_step: int = 0, out: TextIO = sys.stdout, width: int = 20):
        self.total, self.out, self.width = total, out, width
        self.start, self.first_step = time.time(), first_step
        # Open MPI gives ranks a pseudo-terminal even when mpirun's own output is a file: under mpirun,
        # redraw in place only when the --nproc supervisor says its output is a terminal.
        tty = settings.get(TTY_ENV)
        self.tty = out.isatty() and (tty if tty is not None else "OMPI_COMM_WORLD_SIZE" not in os.environ)

    def show(self, row: dict[str, Any]) -> None:
        step = row["step"]
        done = step / self.total
        bar = "#" * int(done * self.width) + "." * (self.width - int(done * self.width))
        rate = (step - self.first_step) / max(time.time() - self.start, 1e-9)
        parts = [
            f"step {step}/{self.total} [{bar}] {100 * done:3.0f}%",
            f"ep {row['epoch']}",
            f"loss {row['loss']:.4f}",
            f"lr {row['lr']:.3g}",
            f"{row['samples_per_s']:.0f} samples/s",
        ]
        if row.get("tokens_per_s") is not None:
            parts.append(f"{row['tokens_per_s']:.0f} tok/s")
        if row.get("mfu") is not None:
            parts.append(f"mfu {100 * row['mfu']:.1f}%")
        if row.get("H") is not None:
            parts.append(f"H {row['H']}")
        if row.get("comm_bytes"):  # nothing communicated (one rank, or none yet): no figure
            parts.append(f"comm {_fmt_bytes(row['comm_bytes'])}")
        parts.append(f"eta {_fmt_time((self.total - step) / rate if rate > 0 else 0)}")
        line = " | ".join(parts)
        self.out.write(("\r" + line) if self.tty else (line + "\n"))
        self.out.flush()

    def message(self, text: str) -> None:
        self.out.write(("\n" if self.tty else "") + text + "\n")
        self.out.flush()


class Metrics:
    def __init__(
        self,
        run_dir: Path,
        cfg: LoggingConfig,
        rank: int,
        total_steps: int,
        log_every: int,
        config: dict[str, Any],
        resumed_at: int | None,
    ):
        self.active, self.cfg, self.log_every = rank == 0, cfg, log_every
        self.run_dir, self.total_steps = run_dir, total_steps
        self._csv: dict[str, tuple[TextIO, csv.DictWriter | None]] = {}
        self._jsonl: dict[str, TextIO] = {}
        self.progress = Progress(total_steps, resumed_at or 0) if self.active and cfg.progress else None
        self.tb = self.wandb = None
        if not self.active:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        if resumed_at is not None:
            for name in FILES:
                _truncate(run_dir / name, resumed_at)
        else:
            for name in FILES:
                (run_dir / name).unlink(missing_ok=True)
        if cfg.tensorboard:
            tensorboard = requirements.require("logging.tensorboard", True, "torch.utils.tensorboard")
            self.tb = tensorboard.SummaryWriter(str(run_dir / "tensorboard"))
        if cfg.wandb != "disabled":
            wandb = requirements.require("logging.wandb", cfg.wandb)
            self.wandb = wandb.init(
                project=cfg.wandb_project,
                name=run_dir.name,
                dir=str(run_dir),
                mode=cfg.wandb,
                config=config,
                tags=cfg.wandb_tags,
                resume="allow",
            )

    def take_over(self, step: int) -> None:
        """This rank writes the CSV/JSONL metrics and the progress line from now on, from step `step` (the
        rank that wrote them was lost: its rows past `step` are dropped). TensorBoard and W&B stay with it."""
        self.active = True
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            _truncate(self.run_dir / name, step)
        self.progress = Progress(self.total_steps, step) if self.cfg.progress else None

    def _write(self, kind: str, row: dict[str, Any]) -> None:
        if self.cfg.csv:
            path = self.run_dir / f"{kind}.csv"
            if kind not in self._csv:
                header = None
                if path.exists() and path.stat().st_size:
                    with open(path) as f:
                        header = next(csv.reader(f))
                f = open(path, "a", newline="")
                writer = csv.DictWriter(f, fieldnames=header or list(row), extrasaction="ignore")
                if header is None:
                    writer.writeheader()
                self._csv[kind] = (f, writer)
            f, writer = self._csv[kind]
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
            f.flush()
        if self.cfg.jsonl:
            if kind not in self._jsonl:
                self._jsonl[kind] = open(self.run_dir / f"{kind}.jsonl", "a")
            self._jsonl[kind].write(json.dumps(row) + "\n")
            self._jsonl[kind].flush()

    def _points(self, prefix: str, row: dict[str, Any]) -> None:
        numbers = {
            f"{prefix}/{k}": v
            for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step"
        }
        if self.tb is not None:
            for k, v in numbers.items():
                self.tb.add_scalar(k, v, row["step"])
        if self.wandb is not None:
            self.wandb.log(numbers, step=row["step"])

    def step(self, row: dict[str, Any]) -> None:
        if not self.active:
            return
        self._write("train", row)
        if row["step"] % self.log_every == 0:
            if self.progress:
                self.progress.show(row)
            self._points("train", row)

    def eval(self, row: dict[str, Any]) -> None:
        if not self.active:
            return
        self._write("eval", row)
        self._points("eval", row)
        if self.progress:
            acc = f" acc {100 * row['accuracy']:.2f}%" if row.get("accuracy") is not None else ""
            self.progress.message(f"eval @ step {row['step']} (epoch {row['epoch']}): loss {row['loss']:.4f}{acc}")

    def message(self, text: str) -> None:
        if self.active:
            (self.progress.message if self.progress else print)(text)

    def close(self) -> None:
        for f, _ in self._csv.values():
            f.close()
        for f in self._jsonl.values():
            f.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
