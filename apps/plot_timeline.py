"""A per-rank timeline of a chrome trace written by pycomm.profile() (`python -m apps.plot TRACE.json`):
for each rank, one lane of torch's computation (when the trace has it) and one lane per communicator
row with pycomm's ops, each op coloured by phase (queued, op check, waiting for peers, on the wire)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pycomm.tracing.analysis import is_computation, merge_intervals  # noqa: E402
from pycomm.tracing.chrome import PHASE_CATEGORY, SPAN_CATEGORY  # noqa: E402

PHASE_COLOURS = {"queued": "#d9d9d9", "op_check": "#fdb462", "wait_peers": "#fb8072", "wire": "#4c72b0"}
COMPUTE_COLOUR = "#8dd3c7"
SPAN_COLOUR = "#bebada"


def draw_timeline(trace_events: list[dict], out: Path, title: Optional[str] = None) -> Path:
    """Writes the timeline PNG of a merged (or one rank's) trace to `out`; returns it."""
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace_events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    procs = {
        e["pid"]: e["args"]["name"] for e in trace_events if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    xs = [e for e in trace_events if e.get("ph") == "X" and "dur" in e]
    if not xs:
        raise ValueError("the trace has no slices to draw")
    t0 = min(float(e["ts"]) for e in xs)
    lanes: dict[tuple, list[tuple[float, float, str]]] = {}
    for e in xs:
        a, d = (float(e["ts"]) - t0) / 1e3, float(e["dur"]) / 1e3
        pid = e["pid"]
        if is_computation(e):
            lanes.setdefault((pid, 0, "computation"), []).append((a, a + d, COMPUTE_COLOUR))
        elif e.get("cat") == PHASE_CATEGORY and e.get("name") in PHASE_COLOURS:
            lanes.setdefault((pid, 1, names.get((pid, e["tid"]), str(e["tid"]))), []).append(
                (a, a + d, PHASE_COLOURS[e["name"]])
            )
        elif e.get("cat") == SPAN_CATEGORY:
            lanes.setdefault((pid, 2, names.get((pid, e["tid"]), str(e["tid"]))), []).append((a, a + d, SPAN_COLOUR))
    keys = sorted(lanes, key=lambda k: (k[0], k[1], k[2]))
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(keys) + 1.6))
    for row, key in enumerate(keys):
        bars = lanes[key]
        if key[1] == 0:  # computation: merged, one colour
            merged = merge_intervals((a, b) for a, b, _ in bars)
            ax.broken_barh([(a, b - a) for a, b in merged], (row - 0.4, 0.8), color=COMPUTE_COLOUR)
        else:
            ax.broken_barh([(a, b - a) for a, b, _ in bars], (row - 0.4, 0.8), color=[c for _, _, c in bars])
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"{procs.get(k[0], f'pid {k[0]}')}: {k[2]}" for k in keys], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms, rank 0's clock)")
    ax.legend(
        handles=[Patch(color=COMPUTE_COLOUR, label="computation (torch)")]
        + [Patch(color=c, label=p.replace("_", " ")) for p, c in PHASE_COLOURS.items()]
        + [Patch(color=SPAN_COLOUR, label="compound op / segment")],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 if len(keys) > 6 else -0.25),
        ncol=6,
        fontsize=8,
    )
    ax.set_title(f"pycomm timeline{': ' + title if title else ''}")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
