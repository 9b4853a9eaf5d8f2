"""`apps.train --trace A:B`: steps A to B-1 of the run captured with torch.profiler plus pycomm's trace on
every rank (pycomm.profile(..., torch=True)), written to RUN_DIR/trace/ (trace.json merged on rank 0's
clock, ranks/rank<R>.json per rank: the directory Holistic Trace Analysis reads), and on rank 0 the
communication/computation overlap and the top ops in the run's output, and timeline.png."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import pycomm
from pycomm.tracing import analysis as trace_analysis


def parse(text: str) -> tuple[int, int]:
    """ "A:B" -> (A, B): the steps A <= step < B (0-based optimizer steps)."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--trace takes STEPS as A:B (steps A to B-1, e.g. 10:15), got {text!r}") from None
    if not 0 <= a < b:
        raise ValueError(f"--trace {text}: need 0 <= A < B (steps A to B-1), got A={a}, B={b}")
    return a, b


class TraceWindow:
    """Starts the profile before step `first` and ends it after step `end - 1` (or when the run ends)."""

    def __init__(self, steps: tuple[int, int], run_dir: Path, comm: Any, message: Callable[[str], None]) -> None:
        self.first, self.end = steps
        self.directory = Path(run_dir) / "trace"
        self.comm, self.message = comm, message
        self.profile: Optional[pycomm.tracing.profiling.Profile] = None
        self.done = False

    def before_step(self, step: int) -> None:
        if self.profile is None and not self.done and self.first <= step < self.end:
            self.profile = pycomm.profile(self.directory, self.comm, torch=True).start()

    def after_step(self, step: int) -> None:
        if self.profile is not None:
            if step + 1 >= self.end:
                self.close()
            else:
                self.profile.step()  # ProfilerStep#N: N = step - first

    def close(self) -> None:
        """Ends the capture (collective); rank 0 reports it and draws the timeline."""
        if self.profile is None:
            return
        profile, self.profile = self.profile, None
        self.done = True
        profile.stop()
        if profile.merged_path is None:
            return
        events = json.loads(profile.merged_path.read_text())["traceEvents"]
        self.message(
            f"trace of steps {self.first}-{self.end - 1}: {profile.merged_path} (per rank: {profile.rank_path.parent})"
        )
        for line in trace_analysis.describe(events):
            self.message(f"  {line}")
        try:
            from apps.plot_timeline import draw_timeline

            png = draw_timeline(events, self.directory / "timeline.png", title=f"steps {self.first}-{self.end - 1}")
            self.message(f"  timeline: {png}")
        except Exception as e:  # noqa: BLE001  (a figure is a by-product: the trace stands)
            print(
                f"warning: the timeline was not drawn ({type(e).__name__}: {e}); draw it with "
                f"`python -m apps.plot {profile.merged_path}`",
                file=sys.stderr,
                flush=True,
            )
