"""A cost model of a training step across nodes, fitted to benchmarks/nodes.py's runs and used to predict each
method's step time on large machines.

    step_s = compute_s_per_sample * batch_per_rank            (the rank's forward, backward and update)
           + latency_s * messages                             (inter-node hops, one latency each; apps.train's
                                                               per-step preemption agreement is one more small
                                                               all-reduce, the peers' loops have none)
           + byte_s[link] * bytes                             (bytes one node sends across its link per step)
           + codec_s_per_element * coded_elements             (quantizing and dequantizing, codecs only)

No overlap of communication with compute is assumed (one bucket per model here: there is nothing to overlap).
A method enters only through what it sends per step, which is measured: `ops` = bytes per step / (model bytes
x its codec's size ratio), the number of whole-model collectives per step (mbsgd 1, zero3 3, plsgd with H = 8
1/8, ...). On n nodes a ring moves 2(n-1)/n of a model per all-reduce through each node's NICs (1 at n = 2),
and a collective's latency is 2 log2(n) hops (a tree, as NCCL picks for small messages; 2 at n = 2).

    python -m benchmarks.cost_model               # fit to results/nodes.json, print constants and predictions"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from benchmarks.harness import RESULTS
from benchmarks.nodes_cases import CASES

# bytes sent per fp32 element: the codecs' payload with one fp32 scale per 256-element block
CODEC_RATIO: dict[str, float] = {"int8": (256 + 4) / 1024, "int4": (128 + 4) / 1024, "onebit": (32 + 4) / 1024}
CASE_CODEC: dict[str, str] = {"mbsgd+int8": "int8", "mbsgd+1bit": "onebit", "hsdp+diloco": "int4"}
# the relative error of a step time the fit may leave on the committed runs (median, worst): runs on a quiet
# machine (2026-11-29, load 2-3, medians of 3 seeds) gave 10% and 42%; on a loaded one (load 15-20) a run's step
# time moves by 2x and the fit left 30% and 77%, so results measured that way should not be committed for the fit
MEDIAN_TOLERANCE, WORST_TOLERANCE = 0.2, 0.5
INDEPENDENT = ("mbsgd-nocomm",)  # no communication: a point of compute alone


@dataclass(frozen=True)
class Point:
    """One measured (or synthetic) run: a method on a link."""

    case: str
    link: str
    batch: int  # samples per rank per step
    bytes_per_step: float  # bytes one node sends across its link per step
    model_bytes: int
    step_s: float
    nodes: int = 2
    agreements_per_step: float = 0.0  # apps.train's preemption all-reduces per step (latency only)

    @property
    def ratio(self) -> float:
        return CODEC_RATIO.get(CASE_CODEC.get(self.case, ""), 1.0)

    @property
    def ops(self) -> float:
        """Whole-model collectives per step, from the bytes: 2(n-1)/n x model x codec ratio each."""
        return self.bytes_per_step / (self.model_bytes * self.ratio * ring_share(self.nodes))

    def messages(self) -> float:
        return (self.ops + self.agreements_per_step) * hops(self.nodes)

    def coded_elements(self) -> float:
        return self.ops * self.model_bytes / 4 if self.case in CASE_CODEC else 0.0


def ring_share(nodes: int) -> float:
    return 2 * (nodes - 1) / nodes


def hops(nodes: int) -> float:
    return 2 * math.ceil(math.log2(nodes)) if nodes > 1 else 0.0


@dataclass(frozen=True)
class Fit:
    compute_s_per_sample: float
    latency_s: float
    byte_s: dict[str, float]  # per link: seconds per byte (1 / effective bytes per second)
    codec_s_per_element: float

    def step_s(self, p: Point) -> float:
        return (
            self.compute_s_per_sample * p.batch
            + self.latency_s * p.messages()
            + self.byte_s[p.link] * p.bytes_per_step
            + self.codec_s_per_element * p.coded_elements()
        )


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares (scipy's Lawson-Hanson): every constant is a cost. A clipped plain least
    squares is not a substitute (its fit is far off), so without scipy this says how to get it."""
    try:
        from scipy.optimize import nnls
    except ImportError:
        raise ImportError(
            "benchmarks.cost_model fits with scipy's nnls: pip install -r scripts/requirements-test.txt"
        ) from None
    return nnls(a, b)[0]


def fit(points: Sequence[Point]) -> Fit:
    """The constants that minimise the relative error of every point's step time (rows scaled by 1/step_s,
    so a fast point counts as much as a slow one)."""
    if not points:
        raise ValueError("fit: no points to fit")
    links = sorted({p.link for p in points})
    rows = [
        [p.batch, p.messages(), *(p.bytes_per_step if p.link == k else 0.0 for k in links), p.coded_elements()]
        for p in points
    ]
    a, b = np.array(rows, dtype=float), np.array([p.step_s for p in points])
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    x = _nnls(a / scale / b[:, None], np.ones(len(points))) / scale
    return Fit(float(x[0]), float(x[1]), {k: float(x[2 + i]) for i, k in enumerate(links)}, float(x[-1]))


def points_from_results(doc: Mapping[str, Any], model_bytes: int) -> list[Point]:
    """The points of a benchmarks/nodes.py result: each row's step time and bytes per node per step."""
    steps, nodes, batch = doc["steps"], doc["nodes"], doc["batch_per_rank"]
    return [
        Point(
            r["case"],
            r["rate"],
            batch,
            r["bytes_across"] / 2 / steps,
            model_bytes,
            r["train_s"] / steps,
            nodes,
            CASES[r["case"]].agreements_per_step,
        )
        for r in doc["rows"]
    ]


# ---- predicting at scale ----
@dataclass(frozen=True)
class System:
    """A machine: its nodes' accelerators and NICs; what is assumed is said in `about`."""

    name: str
    gpus_per_node: int
    node_bytes_per_s: float  # all NICs of a node together
    latency_s: float  # one inter-node hop, software included
    flops_per_s: float  # one accelerator's fp32 peak x the fraction a small model reaches
    about: str


FRONTIER = System(
    "frontier-like",
    8,
    4 * 25e9,
    5e-6,
    23.9e12 * 0.3,
    "8 GCDs per node (4 MI250X), 4 x 25 GB/s Slingshot NICs, 5 us per hop, a GCD's 23.9 TFLOP/s "
    "fp32 at 30% utilisation",
)
S3DF = System(
    "s3df-like",
    4,
    200e9 / 8,
    5e-6,
    19.5e12 * 0.3,
    "4 A100 per node, one 200 Gb/s HDR InfiniBand NIC, 5 us per hop, an A100's 19.5 TFLOP/s fp32 at 30% utilisation",
)


def predict(system: System, gpus: int, measured: Point, flops_per_sample: float, fitted: Fit) -> dict[str, float]:
    """The step time of `measured`'s method at `gpus` accelerators of `system` (weak scaling: the same batch per
    accelerator): compute from the model's FLOPs, communication from the method's measured traffic scaled to
    n nodes, the codec's cost scaled from the fit by the accelerator's speed over this machine's."""
    nodes = max(1, gpus // system.gpus_per_node)
    share = ring_share(nodes) / ring_share(measured.nodes)
    compute = flops_per_sample * measured.batch / system.flops_per_s
    speedup = fitted.compute_s_per_sample * system.flops_per_s / flops_per_sample if fitted.compute_s_per_sample else 1
    comm_bytes = measured.bytes_per_step * share
    comm = (
        system.latency_s * (measured.ops + measured.agreements_per_step) * hops(nodes)
        + comm_bytes / system.node_bytes_per_s
    )
    codec = fitted.codec_s_per_element * measured.coded_elements() / max(speedup, 1.0)
    return {
        "gpus": gpus,
        "nodes": nodes,
        "compute_s": compute,
        "comm_s": comm,
        "codec_s": codec,
        "step_s": compute + comm + codec,
    }


def relative_errors(fitted: Fit, points: Iterable[Point]) -> list[float]:
    return [abs(fitted.step_s(p) - p.step_s) / p.step_s for p in points]


GPUS = (64, 256, 1024, 4096)
CNN_FLOPS_PER_SAMPLE = 17.5e6  # SmallCNN forward + backward (torch.utils.flop_counter)
FIGURE = RESULTS.parent.parent / "docs" / "images" / "scaling.png"


def scaling_rows(points: Sequence[Point], fitted: Fit, flops_per_sample: float) -> list[dict[str, Any]]:
    """Each communicating method's predicted step time on each system at each size (the 100 Mbit/s run's
    traffic: what a method sends does not depend on the link)."""
    rows = []
    for p in points:
        if p.case in INDEPENDENT or p.link != "100mbit":
            continue
        for system in (FRONTIER, S3DF):
            for g in GPUS:
                rows.append({"system": system.name, "case": p.case, **predict(system, g, p, flops_per_sample, fitted)})
    return rows


def markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    return "\n".join(
        ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
        + ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    )


def draw(rows: Sequence[Mapping[str, Any]], points: Sequence[Point], fitted: Fit, path: Path = FIGURE) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    links = sorted({p.link for p in points})
    for i, link in enumerate(links):
        mine = [p for p in points if p.link == link]
        axes[0].scatter(
            [p.step_s * 1e3 for p in mine], [fitted.step_s(p) * 1e3 for p in mine], label=link, color=f"C{i}"
        )
    top = max(max(p.step_s, fitted.step_s(p)) for p in points) * 1e3 * 1.1
    axes[0].plot([0, top], [0, top], color="grey", linewidth=0.8)
    axes[0].set_xlabel("measured step (ms)")
    axes[0].set_ylabel("model step (ms)")
    axes[0].set_title("the fit against the runs (2 nodes, emulated links)", fontsize=9)
    axes[0].legend(fontsize=8)
    for ax, system in zip(axes[1:], (FRONTIER, S3DF)):
        for j, case in enumerate(dict.fromkeys(r["case"] for r in rows)):
            mine = [r for r in rows if r["system"] == system.name and r["case"] == case]
            ax.plot(
                [r["gpus"] for r in mine],
                [r["step_s"] * 1e3 for r in mine],
                marker="o",
                label=case,
                color=f"C{j % 10}",
                linestyle="-" if j < 10 else "--",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("accelerators")
        ax.set_ylabel("predicted step (ms)")
        ax.set_title(f"{system.name}: MNIST CNN, batch 32 per accelerator", fontsize=9)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


SCALING_DOC = RESULTS.parent.parent / "docs" / "scaling.md"


def fill(text: str, section: str, body: str) -> str:
    """`text` with the generated `section` of docs/scaling.md (between its markers) replaced by `body`."""
    begin, end = f"<!-- {section}: generated by `python -m benchmarks.cost_model` -->", f"<!-- end of {section} -->"
    if begin not in text or end not in text:
        raise ValueError(f"{SCALING_DOC} has no {section} section: put the lines\n{begin}\n{end}\nwhere it belongs")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1]


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    from apps.models import SmallCNN

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS / "nodes.json")
    ap.add_argument("--doc", type=Path, default=SCALING_DOC, help="the document whose generated sections to write")
    ap.add_argument("--figure", type=Path, default=FIGURE)
    args = ap.parse_args(argv)
    doc = json.loads(args.results.read_text())
    if doc.get("model", "mnist-cnn") != "mnist-cnn":  # the model's bytes and FLOPs below are the CNN's
        ap.error(f"{args.results} is a run of {doc['model']}; the cost model is fitted to the MNIST CNN's runs")
    model_bytes = sum(p.numel() * 4 for p in SmallCNN().parameters())
    points = points_from_results(doc, model_bytes)
    fitted = fit(points)
    constants = (
        f"compute {fitted.compute_s_per_sample * 1e3:.4g} ms per sample, latency {fitted.latency_s * 1e3:.4g} "
        f"ms per hop, codec {fitted.codec_s_per_element * 1e9:.4g} ns per element, link bandwidths "
        + ", ".join(f"{k} {1 / v / 1e6 if v else float('inf'):.4g} MB/s" for k, v in fitted.byte_s.items())
    )
    measured = [
        {
            "link": p.link,
            "case": p.case,
            "ops": p.ops,
            "measured_ms": p.step_s * 1e3,
            "model_ms": fitted.step_s(p) * 1e3,
            "error": err,
        }
        for p, err in zip(points, relative_errors(fitted, points))
    ]
    errors = sorted(m["error"] for m in measured)
    fitted_md = (
        f"Fitted to {len(points)} runs of `benchmarks/results/nodes.json` ({doc['environment']['date']}, "
        f"load average {doc['environment'].get('load_average')}): {constants}. Median error "
        f"{errors[len(errors) // 2]:.0%}, worst {errors[-1]:.0%} (tests/infra/test_cost_model.py holds "
        f"the fit to a median of {MEDIAN_TOLERANCE:.0%} and a worst of {WORST_TOLERANCE:.0%} on these runs, and "
        "to 1e-6 on synthetic points).\n\n"
        + markdown(measured, ["link", "case", "ops", "measured_ms", "model_ms", "error"])
        + "\n\n![scaling](images/scaling.png)"
    )
    rows = scaling_rows(points, fitted, CNN_FLOPS_PER_SAMPLE)
    for r in rows:
        r["step_ms"], r["comm_ms"] = r["step_s"] * 1e3, r["comm_s"] * 1e3
    predicted_md = markdown(
        [r for r in rows if r["gpus"] in (64, 4096)], ["system", "case", "gpus", "nodes", "step_ms", "comm_ms"]
    )
    print(constants)
    print(fitted_md)
    print(predicted_md)
    args.doc.write_text(fill(fill(args.doc.read_text(), "fit", fitted_md), "predictions", predicted_md))
    print(f"wrote {draw(rows, points, fitted, args.figure)} and {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
