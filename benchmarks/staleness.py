"""Bounded staleness and parameter servers under a straggler: 4 independent processes (ZeroMQ), one of
them computing 2x slower (it sleeps as long as each step computed), and the same without a straggler.
Cases: mbsgd (as ssp with K = 0, which is mbsgd: tests/algorithms/test_ps_rules.py), ssp K = 1, 2, 4,
asyncps with fp32 and int8 pushes, syncps. Reported per case: samples/s (all trainers' samples over the
slowest trainer's time), the ratio to mbsgd in the same setting, final accuracy, bytes pushed per trainer
and the ratio to fp32 asyncps, staleness seen. The parameter servers use 1 server + 3 workers, ssp 4
trainers. Usage: python -m benchmarks.staleness [--steps N] [--repeats R]."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks import harness
from benchmarks.run_ranks import finish, independent

WORLD, STRAGGLER = 4, 3
CASES = {
    "mbsgd": {"algorithm": "ssp", "options": {"staleness_bound": 0}},
    "ssp K=1": {"algorithm": "ssp", "options": {"staleness_bound": 1, "staleness_correction": "momentum"}},
    "ssp K=2": {"algorithm": "ssp", "options": {"staleness_bound": 2, "staleness_correction": "momentum"}},
    "ssp K=4": {"algorithm": "ssp", "options": {"staleness_bound": 4, "staleness_correction": "momentum"}},
    "ssp K=2 uncorrected": {"algorithm": "ssp", "options": {"staleness_bound": 2, "staleness_correction": None}},
    # momentum lowered by hand, the plain rule (the default correction would lower it again)
    "asyncps fp32": {"algorithm": "asyncps", "options": {"staleness_correction": None}, "momentum": 0.5},
    "asyncps int8": {
        "algorithm": "asyncps",
        "options": {"codec": "int8", "staleness_correction": None},
        "momentum": 0.5,
    },
    "syncps": {"algorithm": "syncps", "options": {}},
}


def run_case(case: dict, steps: int, straggler: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        case = {**case, "options": {"worker_timeout": 60, **case["options"]}}
        finish(
            independent(WORLD, "benchmarks.workers.staleness_run", json.dumps(case), str(steps), str(straggler), out),
            timeout=900,
        )
        ranks = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(WORLD)]
    trainers = [r for r in ranks if "samples" in r]
    slowest = max(trainers, key=lambda r: r["seconds"])
    curve = next(r["curve"] for r in ranks if "curve" in r)
    return {
        "samples_per_s": sum(r["samples"] for r in trainers) / slowest["seconds"],
        "accuracy": next(r["accuracy"] for r in ranks if "accuracy" in r),
        "seconds_to_95": next((sec for sec, acc in curve if acc >= 0.95), None),
        "bytes_pushed_per_trainer": statistics.mean(r["bytes_pushed"] for r in trainers),
        "max_staleness": max(r["max_staleness"] for r in ranks),
        "mean_staleness": statistics.mean(r["mean_staleness"] for r in trainers),
        "rejected": max(r["rejected"] for r in ranks),
        # where the slowest trainer's time went, and the fast trainers' time inside opt.step
        "slowest_computing_s": slowest["computing"] + slowest["sleeping"],
        "slowest_in_step_s": slowest["stepping"],
        "others_in_step_s": statistics.mean(r["stepping"] for r in trainers if r is not slowest),
        "curve": curve,
    }


def run_case_retrying(case: dict, steps: int, straggler: int) -> dict:
    """One retry: on a shared machine another program can take a port between choosing it and binding it."""
    try:
        return run_case(case, steps, straggler)
    except AssertionError:
        return run_case(case, steps, straggler)


def median_row(runs: list[dict]) -> dict:
    """Per key the median over the repeats (None where one run never got there), the first run's curve."""
    row = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if key == "curve":
            row[key] = values[0]
        elif any(v is None for v in values):
            row[key] = None
        else:
            row[key] = statistics.median(values)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150, help="steps per trainer")
    p.add_argument("--repeats", type=int, default=1, help="runs per case (median reported)")
    p.add_argument("--lock", default=None, help="a file to flock while each case runs (shared machines)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows of results/staleness.json (same --steps) and run only the missing cases",
    )
    args = p.parse_args()
    rows = previous_rows(args.steps) if args.resume else []
    for straggler in (STRAGGLER, -1):
        for name, case in CASES.items():
            if any(r["case"] == name and r["straggler"] == (straggler >= 0) for r in rows):
                continue
            runs = []
            for _ in range(args.repeats):
                with harness.held(args.lock):
                    runs.append(run_case_retrying(case, args.steps, straggler))
            row = {"case": name, "straggler": straggler >= 0, **median_row(runs)}
            rows.append(row)
            print(harness.table([row], [k for k in row if k != "curve"]), flush=True)
            save(rows, args, complete=False)  # a run cut short keeps the finished cases
    print(harness.table(rows, COLUMNS))
    save(rows, args, complete=True)


COLUMNS = [
    "case",
    "straggler",
    "samples_per_s",
    "speed_vs_mbsgd",
    "accuracy",
    "accuracy_minus_mbsgd",
    "seconds_to_95",
    "bytes_vs_asyncps_fp32",
    "max_staleness",
    "mean_staleness",
    "rejected",
    "slowest_computing_s",
    "slowest_in_step_s",
    "others_in_step_s",
]


def previous_rows(steps: int) -> list[dict]:
    path = harness.RESULTS / "staleness.json"
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    return doc["rows"] if doc.get("steps") == steps else []


def compare(rows: list[dict]) -> None:
    """Each row's ratios to its setting's mbsgd and fp32 asyncps (None while that peer has not run)."""
    for row in rows:
        peers = {r["case"]: r for r in rows if r["straggler"] == row["straggler"]}
        mbsgd, fp32 = peers.get("mbsgd"), peers.get("asyncps fp32")
        row["speed_vs_mbsgd"] = row["samples_per_s"] / mbsgd["samples_per_s"] if mbsgd else None
        row["accuracy_minus_mbsgd"] = row["accuracy"] - mbsgd["accuracy"] if mbsgd else None
        row["bytes_vs_asyncps_fp32"] = (
            row["bytes_pushed_per_trainer"] / fp32["bytes_pushed_per_trainer"] if fp32 else None
        )


def save(rows: list[dict], args: argparse.Namespace, complete: bool) -> None:
    compare(rows)

    def plot(ax) -> None:
        names = list(CASES)
        for offset, straggler in ((-0.2, True), (0.2, False)):
            vals = [
                next((r["speed_vs_mbsgd"] or 0.0 for r in rows if r["case"] == n and r["straggler"] == straggler), 0.0)
                for n in names
            ]
            ax.bar(
                [i + offset for i in range(len(names))],
                vals,
                width=0.4,
                label="with a 2x straggler" if straggler else "no straggler",
            )
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_ylabel("samples/s relative to mbsgd (same setting)")
        ax.set_title(f"{WORLD} processes, TinyCNN MNIST, {args.steps} steps per trainer")
        ax.legend()

    harness.save("staleness", {"steps": args.steps, "repeats": args.repeats, "complete": complete, "rows": rows}, plot)


if __name__ == "__main__":
    main()
