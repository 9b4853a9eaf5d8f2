"""From run directories to numbers: each run's final eval metrics, bytes sent per rank (rank 0's
`opt.comm_stats()`, as apps.train logs it) and time to target; mean and spread over seeds per variant."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from apps.plot import load_run
from benchmarks.reproduce.grid import Task, Variant
from benchmarks.reproduce.runner import RunSpec


def _at_step(steps: list[float], values: list[float], step: float) -> float:
    """The value logged at `step`, or at the last step before it (lapsgd logs once per chunk)."""
    best = math.nan
    for s, v in zip(steps, values):
        if s <= step and math.isfinite(v):
            best = v
    return best


def read_run(spec: RunSpec, runs_dir: Path) -> dict[str, Any]:
    """One finished run: its eval curve (step, bytes, time, loss, accuracy) and what it ends with."""
    data = load_run(spec.directory(runs_dir))
    ev, tr = data.eval, data.train
    accuracy = ev.get("accuracy", [math.nan] * len(ev["step"]))
    curve = [
        {"step": int(s), "bytes": _at_step(tr["step"], tr["comm_bytes"], s), "time": t, "loss": loss, "accuracy": acc}
        for s, t, loss, acc in zip(ev["step"], ev["time"], ev["loss"], accuracy)
    ]
    task = spec.variant.task
    reached = [p["time"] for p in curve if task.better(p[task.metric], task.target)]
    last = curve[-1]
    return {
        "seed": spec.seed,
        "steps": last["step"],
        "bytes": last["bytes"],
        "loss": last["loss"],
        "accuracy": last["accuracy"],
        "seconds": last["time"],
        "time_to_target": reached[0] if reached else None,
        "curve": curve,
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def _mean_curve(runs: list[dict[str, Any]], metric: str) -> list[dict[str, float]]:
    """Per evaluation step common to all seeds: mean bytes, mean / min / max of the metric."""
    steps = sorted(set.intersection(*(set(p["step"] for p in r["curve"]) for r in runs)))
    out = []
    for step in steps:
        points = [next(p for p in r["curve"] if p["step"] == step) for r in runs]
        values = [p[metric] for p in points]
        out.append(
            {
                "step": step,
                "bytes": statistics.fmean(p["bytes"] for p in points),
                "mean": statistics.fmean(values),
                "min": min(values),
                "max": max(values),
            }
        )
    return out


def summarise_variant(variant: Variant, runs: list[dict[str, Any]], seeds: int) -> dict[str, Any]:
    """Mean and spread over the finished seeds of one variant (None fields when none finished)."""
    task = variant.task
    row: dict[str, Any] = {
        "task": task.key,
        "method": variant.method.key,
        "label": variant.label,
        "algorithm": variant.method.algorithm,
        "codec": variant.codec or "fp32",
        "options": variant.method.algorithm_options(task),
        "seeds_done": len(runs),
        "seeds_planned": seeds,
        "runs": runs,
    }
    if not runs:
        return row
    times = [r["time_to_target"] for r in runs if r["time_to_target"] is not None]
    row.update(
        {
            "bytes": _spread([r["bytes"] for r in runs]),
            "loss": _spread([r["loss"] for r in runs]),
            "accuracy": _spread([r["accuracy"] for r in runs])
            if all(math.isfinite(r["accuracy"]) for r in runs)
            else None,
            "seconds": _spread([r["seconds"] for r in runs]),
            "time_to_target": {
                "target": task.target,
                "metric": task.metric,
                "reached": len(times),
                "mean": statistics.fmean(times) if times else None,
            },
            "curve": _mean_curve(runs, task.metric),
        }
    )
    return row


# -- the papers' orderings ----------------------------------------------------------------------------


def interpolate_log_bytes(points: list[tuple[float, float, str]], at: float) -> tuple[float, str, bool]:
    """The constant-H frontier (final metric against log bytes, linear between neighbours) at `at`
    bytes; returns (value, which runs bracket it, whether `at` lies inside the frontier's range)."""
    points = sorted(points)
    if at <= points[0][0]:
        return points[0][1], points[0][2], at == points[0][0]
    if at >= points[-1][0]:
        return points[-1][1], points[-1][2], at == points[-1][0]
    for (b0, m0, l0), (b1, m1, l1) in zip(points, points[1:]):
        if b0 <= at <= b1:
            w = (math.log(at) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return m0 + w * (m1 - m0), f"{l0} .. {l1}", True
    raise AssertionError("unreachable: `at` lies between the first and the last point")


def _beyond_spread(difference: float, rows: list[dict[str, Any]], metric: str) -> bool | None:
    """Whether a difference exceeds the largest seed standard deviation of the rows compared (None
    when one of them has a single seed: no spread to judge by)."""
    if min(r["seeds_done"] for r in rows) < 2:
        return None
    return abs(difference) > max(r[metric]["std"] for r in rows)


def qsr_vs_constant_h(task: Task, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """QSR's final metric against plsgd's (constant H) at QSR's bytes, per codec."""
    done = [r for r in rows if r["task"] == task.key and r["seeds_done"]]
    out = []
    for codec in sorted({r["codec"] for r in done}):
        frontier = [
            (r["bytes"]["mean"], r[task.metric]["mean"], r["label"])
            for r in done
            if r["algorithm"] == "plsgd" and r["codec"] == codec
        ]
        if len(frontier) < 2:
            continue
        constant_h = [r for r in done if r["algorithm"] == "plsgd" and r["codec"] == codec]
        for q in (r for r in done if r["algorithm"] == "qsr" and r["codec"] == codec):
            value, between, inside = interpolate_log_bytes(frontier, q["bytes"]["mean"])
            mine = q[task.metric]["mean"]
            out.append(
                {
                    "task": task.key,
                    "codec": codec,
                    "qsr": q["label"],
                    "metric": task.metric,
                    "qsr_bytes": q["bytes"]["mean"],
                    "qsr_value": mine,
                    "qsr_std": q[task.metric]["std"],
                    "constant_h_value": value,
                    "constant_h_runs": between,
                    "inside_range": inside,
                    "difference": mine - value,
                    "holds": task.better(mine, value),
                    "beyond_seed_spread": _beyond_spread(mine - value, [q, *constant_h], task.metric),
                }
            )
    return out


def lsgd_vs_easgd(task: Task, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """LSGD's final metric against EASGD's (fp32: lsgd takes no codec), with the bytes of each."""
    pick = {r["algorithm"]: r for r in rows if r["task"] == task.key and r["codec"] == "fp32" and r["seeds_done"]}
    if "lsgd" not in pick or "easgd" not in pick:
        return None
    lsgd, easgd = pick["lsgd"], pick["easgd"]
    diff = lsgd[task.metric]["mean"] - easgd[task.metric]["mean"]
    return {
        "task": task.key,
        "metric": task.metric,
        "lsgd_value": lsgd[task.metric]["mean"],
        "lsgd_std": lsgd[task.metric]["std"],
        "easgd_value": easgd[task.metric]["mean"],
        "easgd_std": easgd[task.metric]["std"],
        "lsgd_bytes": lsgd["bytes"]["mean"],
        "easgd_bytes": easgd["bytes"]["mean"],
        "difference": diff,
        "holds": task.better(lsgd[task.metric]["mean"], easgd[task.metric]["mean"]),
        "beyond_seed_spread": _beyond_spread(diff, [lsgd, easgd], task.metric),
    }
