"""The markdown report: one table per task (bytes, final eval loss / accuracy, time to target, mean and
spread over seeds) and the papers' orderings stated as holding or not, with the numbers."""

from __future__ import annotations

from typing import Any

from benchmarks.reproduce.grid import METHODS, TASKS, Task


def _mb(value: float) -> str:
    return f"{value / 1e6:.3g}"


def _metric(task: Task, value: float) -> str:
    return f"{100 * value:.2f}%" if task.metric == "accuracy" else f"{value:.4f}"


def _mean_std(spread: dict[str, float] | None, percent: bool) -> str:
    if not spread:
        return "–"
    k, digits = (100.0, 2) if percent else (1.0, 4)
    return f"{k * spread['mean']:.{digits}f} ± {k * spread['std']:.{digits}f}"


def task_table(task: Task, rows: list[dict[str, Any]]) -> str:
    head = [
        "method",
        "codec",
        "seeds",
        "MB sent / rank",
        "eval loss",
        "eval accuracy (%)",
        f"time to {_metric(task, task.target)} (s, seeds reaching)",
        "run time (s)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in (r for r in rows if r["task"] == task.key):
        if not r["seeds_done"]:
            lines.append(f"| {r['label']} | {r['codec']} | 0/{r['seeds_planned']} | missing | | | | |")
            continue
        ttt = r["time_to_target"]
        reach = (
            f"{ttt['mean']:.1f} ({ttt['reached']}/{r['seeds_done']})"
            if ttt["mean"] is not None
            else f"not reached (0/{r['seeds_done']})"
        )
        lines.append(
            f"| {r['label']} | {r['codec']} | {r['seeds_done']}/{r['seeds_planned']} | "
            f"{_mb(r['bytes']['mean'])} | {_mean_std(r['loss'], False)} | "
            f"{_mean_std(r['accuracy'], True)} | {reach} | {r['seconds']['mean']:.1f} |"
        )
    return "\n".join(lines)


def _verdict(holds: bool, beyond: bool | None) -> str:
    caveat = {True: "", False: " (difference within the seed spread)", None: " (one seed: no spread to judge by)"}
    return ("holds" if holds else "does NOT hold") + caveat[beyond]


def _difference(task: Task, value: float) -> str:
    return f"{100 * value:+.2f} points" if task.metric == "accuracy" else f"{value:+.5f}"


def orderings_text(orderings: dict[str, Any]) -> str:
    lines = []
    for o in orderings["qsr_vs_constant_h"]:
        task = next(t for t in TASKS if t.key == o["task"])
        where = "" if o["inside_range"] else " (QSR's bytes lie outside the constant-H range: nearest end)"
        lines.append(
            f"- QSR >= constant-H local SGD at equal bytes, {o['task']}, {o['codec']}, {o['qsr']}: "
            f"**{_verdict(o['holds'], o['beyond_seed_spread'])}**: {_metric(task, o['qsr_value'])} "
            f"(± {_metric(task, o['qsr_std'])}) at {_mb(o['qsr_bytes'])} MB against "
            f"{_metric(task, o['constant_h_value'])} for plsgd at the same bytes "
            f"(interpolated in log bytes between {o['constant_h_runs']}){where}; difference "
            f"{_difference(task, o['difference'])}."
        )
    for o in orderings["lsgd_vs_easgd"]:
        task = next(t for t in TASKS if t.key == o["task"])
        lines.append(
            f"- LSGD >= EASGD, {o['task']}: **{_verdict(o['holds'], o['beyond_seed_spread'])}**: lsgd "
            f"{_metric(task, o['lsgd_value'])} (± {_metric(task, o['lsgd_std'])}, {_mb(o['lsgd_bytes'])} MB) "
            f"against easgd {_metric(task, o['easgd_value'])} (± {_metric(task, o['easgd_std'])}, "
            f"{_mb(o['easgd_bytes'])} MB); difference {_difference(task, o['difference'])}."
        )
    return "\n".join(lines) or "- (not enough finished runs to compare)"


def markdown(doc: dict[str, Any]) -> str:
    no_codec = [m.label for m in METHODS if len(m.codecs) == 1]
    parts = [
        f"# Reproduction of the papers' comparisons ({'quick' if doc['quick'] else 'full'} mode)",
        "",
        f"{doc['ranks']} ranks (oversubscribed on {doc['environment'].get('cpus')} cores), seeds "
        f"{doc['seeds']}, every method the same number of optimizer steps per task. Bytes: what rank 0's "
        "`opt.comm_stats()` counts (payload handed to collectives in wire format, the initial broadcast "
        "included). Eval: each rank scores its own model on its share of the eval split (local methods' "
        "ranks differ between rounds). Times come from a machine shared with other jobs: noisy; bytes and "
        f"accuracy are not. Methods without a codec: {', '.join(no_codec) or 'none'} (lsgd all-reduces "
        "nothing; pycomm refuses a codec for it).",
        "",
    ]
    for task in TASKS:
        if any(r["task"] == task.key for r in doc["rows"]):
            budget = doc["budgets"][task.key]
            parts += [f"## {task.title}: {budget['steps']} steps", "", task_table(task, doc["rows"]), "", task.note, ""]
    parts += ["## The papers' orderings", "", orderings_text(doc["orderings"]), ""]
    if doc["missing"]:
        parts += ["## Missing runs", "", *(f"- {name}: {why}" for name, why in sorted(doc["missing"].items())), ""]
    return "\n".join(parts)
