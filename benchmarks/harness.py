"""Shared measurement harness: every benchmark times with `measure`, reports ratios against a peer
measured in the same run, and writes benchmarks/results/<name>.json and a PNG through `save`."""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Timing:
    """Seconds per call over `repeats` timed runs (after warm-up)."""

    median: float
    min: float
    max: float
    repeats: int
    samples: list[float] = field(default_factory=list, repr=False)


def measure(
    fn: Callable[[], Any], repeats: int = 7, warmup: int = 2, inner: int = 1, sync: Callable[[], Any] | None = None
) -> Timing:
    """Median/min/max seconds of one call of `fn`. `inner` calls are timed together and divided
    (for calls too short for the clock); `sync` (e.g. torch.cuda.synchronize) runs before each stop."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - t0) / inner)
    return Timing(statistics.median(samples), min(samples), max(samples), repeats, samples)


def measure_gpu(
    fn: Callable[[], Any], repeats: int = 7, warmup: int = 2, before: Callable[[], Any] | None = None
) -> Timing:
    """Median/min/max seconds the GPU spends on one call of `fn`: CUDA events around the call, which is
    queued behind a sleep kernel so that the host's launch overhead is not timed (the sleep doubles until
    it outlasts the queuing). `before` (untimed) runs ahead of each call, e.g. to evict the L2 cache."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    cycles, samples = 1 << 22, []  # ~2 ms at 2 GHz
    while len(samples) < repeats:
        if before is not None:
            before()
        start, end, slept = (
            torch.cuda.Event(enable_timing=True),
            torch.cuda.Event(enable_timing=True),
            torch.cuda.Event(),
        )
        torch.cuda._sleep(cycles)
        slept.record()
        start.record()
        fn()
        end.record()
        hidden = not slept.query()  # still asleep once everything was queued: no launch gap was timed
        end.synchronize()
        if hidden:
            samples.append(start.elapsed_time(end) / 1e3)
        elif cycles < 1 << 34:
            cycles *= 2
        else:
            raise RuntimeError("measure_gpu: queuing the call outlasts a sleep of 2^34 cycles")
    return Timing(statistics.median(samples), min(samples), max(samples), repeats, samples)


def environment() -> dict[str, Any]:
    """What the figures were measured on."""
    env: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        # 1/5/15-minute load averages: whether the figures were measured on an idle or a busy machine.
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        import pycomm

        env["pycomm_build"] = pycomm.build_info()
    except ImportError:
        pass
    return env


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A fixed-width text table of `rows` (floats to 4 significant digits)."""

    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def save(
    name: str,
    payload: dict[str, Any],
    plot: Callable[[Any], None] | None = None,
    results_dir: Path | None = None,
    panels: int = 1,
) -> Path:
    """Write results/<name>.json (payload + environment) and, with `plot(ax)`, results/<name>.png
    (into `results_dir` instead when given, e.g. a temporary folder for smoke tests). With panels > 1,
    `plot` gets that many axes side by side."""
    where = Path(results_dir) if results_dir is not None else RESULTS
    where.mkdir(parents=True, exist_ok=True)
    out = where / f"{name}.json"
    doc = {"benchmark": name, "environment": environment(), **payload}
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(
        json.dumps(doc, indent=2, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o))
    )
    os.replace(tmp, out)
    if plot is not None:
        draw(where / f"{name}.png", plot, panels)
    return out


def plot_if_matplotlib(plot: Callable[[Any], None]) -> Callable[[Any], None] | None:
    """`plot` when matplotlib can be imported, else None: save() then writes the JSON without the PNG,
    so a benchmark still records its figures on a machine without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    return plot


def draw(path: Path, plot: Callable[[Any], None], panels: int = 1) -> Path:
    """The PNG at `path` drawn by `plot(ax)` (a list of `panels` axes side by side when panels > 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(8 if panels == 1 else 6.5 * panels, 5))
    plot(list(axes) if panels > 1 else axes)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def load(name: str, results_dir: Path | None = None) -> dict[str, Any]:
    """results/<name>.json as saved (to draw its PNG again without measuring: each benchmark's --replot)."""
    return json.loads(((Path(results_dir) if results_dir is not None else RESULTS) / f"{name}.json").read_text())


@contextlib.contextmanager
def held(lock: str | Path | None) -> Iterator[None]:
    """An exclusive flock on the file `lock` while inside (on a shared machine: one heavy job at a time, so
    the cases measured inside see the same load), or nothing when `lock` is None."""
    if lock is None:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
