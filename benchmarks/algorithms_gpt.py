"""The GPT section of benchmarks/algorithms.py (`python -m benchmarks.algorithms --model gpt`): where
communication matters. The char GPT (10.7M parameters, a 42.7 MB gradient) on tiny Shakespeare, 4 ranks,
torch DDP (gloo) against pycomm's mbsgd, plsgd, qsr and their int8 variants: samples/s (ratio against DDP
on the same link) and eval loss on held-out text after the same samples from the same seed. Links:
"default" (pycomm's default transport, gloo over loopback TCP) and "shaped" (every rank inside a network
namespace whose loopback runs at 10 Gbit/s, benchmarks/shaped_link.py, MPI and gloo over TCP on it;
root only, skipped with the reason elsewhere).

Each case is one launch (benchmarks/workers/algorithms_gpt_run.py); a repeat runs every case of every
link, the cases rotated so that none always follows another, and `--lock FILE` holds an flock on FILE
while one link's cases of one repeat run (back to back, under the same load; the lock is released
between links and repeats) so that other heavy jobs sharing the machine do not run at the same time. The JSON is rewritten after every case (raw runs + medians so far): an interrupted run keeps what
it measured. Writes results/algorithms_gpt.json and .png.

Defaults (120 steps of 4 sequences x 64 characters per rank, 2 repeats; plsgd H = 6; qsr h_base 4,
alpha = 2.5 lr_peak, exp_avg averaged; the worker's CASES) come from a sweep on the default link: at 40
steps (loss 2.97, the very start) every local method was 5-7% behind DDP, at 120 steps (loss 2.54) H = 4
to 6 are within 1%; docs/gpt_local_sgd_settings.md has the sweep and why. A sweep
passes option overrides per launch (`launch(..., overrides={"averaging_freq": 8})`)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from apps.data.text import EMBEDDED_TEXT
from benchmarks import shaped_link
from benchmarks.harness import held, save, table
from benchmarks.run_ranks import ROOT, free_port, mpirun_argv, worker_env

RANKS = 4
SHAPED_RATE = "10gbit"
CASES = ["ddp", "mbsgd", "plsgd", "qsr", "mbsgd+int8", "plsgd+int8", "qsr+int8"]
LINKS = ("default", "shaped")
SPEEDUP_GOALS = {"mbsgd": 1.0, "plsgd": 1.3, "qsr": 1.3}  # samples/s against DDP on the same link
LOSS_TOLERANCE = 0.01  # plsgd/qsr: eval loss <= 1.01x DDP's
COLUMNS = [
    "case",
    "samples_per_s",
    "speedup_vs_ddp",
    "speedup_min",
    "speedup_max",
    "eval_loss",
    "eval_loss_vs_ddp",
    "bytes_per_step",
    "comm_seconds_per_step",
    "repeats",
    "goal",
]


def launch(
    case: str,
    link: str,
    steps: int,
    batch: int,
    data: Path,
    timeout: float,
    overrides: dict[str, Any] | None = None,
    ranks: int = RANKS,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One case on `ranks` ranks over `link`; the worker's result. `overrides`: a sweep's algorithm options;
    `settings`: the worker's seed and model overrides (benchmarks/workers/algorithms_gpt_run.py)."""
    shaped = link == "shaped"
    mca = shaped_link.TCP_OVER_LOOPBACK if shaped else ()
    with (
        tempfile.TemporaryDirectory(prefix="bench-gpt-") as tmp,
        shaped_link.shaped_namespace(SHAPED_RATE) if shaped else nullcontext([]) as prefix,
    ):
        out = Path(tmp) / "result.json"
        argv = [
            *prefix,
            *mpirun_argv(ranks, mca),
            sys.executable,
            "-m",
            "benchmarks.workers.algorithms_gpt_run",
            str(out),
            case,
            str(steps),
            str(batch),
            str(data),
            *(
                [json.dumps(overrides or {}), json.dumps(settings)]
                if settings
                else [json.dumps(overrides)]
                if overrides
                else []
            ),
        ]
        env = worker_env(
            {
                "BENCH_PORT": str(free_port()),
                "PYCOMM_TIMEOUT": "600",
                **({"GLOO_SOCKET_IFNAME": "lo"} if shaped else {}),
            }
        )
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{case} over {link} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return json.loads(out.read_text())


def goal(row: dict[str, Any], rows: dict[str, dict[str, Any]], link: str) -> str:
    """The goal for this case on this link, met or not ('' where it sets none)."""
    base, _, codec = row["case"].partition("+")
    if codec:
        if link != "shaped" or base not in rows:
            return ""
        faster = row.get("speedup_vs_ddp", 0) > rows[base].get("speedup_vs_ddp", 0)  # per-repeat ratios: drift-free
        return f"> {base} on shaped: {'met' if faster else 'NOT met'}"
    if base not in SPEEDUP_GOALS:
        return ""
    want = SPEEDUP_GOALS[base]
    ok = row["speedup_vs_ddp"] >= want
    text = f">= {want}x"
    if base != "mbsgd":  # mbsgd computes DDP's update: its loss is DDP's by construction
        ok = ok and row["eval_loss_vs_ddp"] <= 1 + LOSS_TOLERANCE
        text += f", loss <= {1 + LOSS_TOLERANCE:g}x"
    return f"{text}: {'met' if ok else 'NOT met'}"


def summarise(runs: list[dict[str, Any]], link: str, cases: list[str]) -> list[dict[str, Any]]:
    """Medians over the repeats of each case on `link`. speedup_vs_ddp is the median over repeats of the
    ratio to DDP's samples/s in the same repeat (measured in the same lock hold, minutes apart: the load
    of a shared machine drifts more than that between repeats)."""
    done = {(r["repeat"], r["case"]): r["result"] for r in runs if r["link"] == link and "result" in r}
    rows: dict[str, dict[str, Any]] = {}
    for case in cases:
        mine = [res for (_, c), res in done.items() if c == case]
        if not mine:
            continue
        ratios = [
            res["samples_per_s"] / done[(rep, "ddp")]["samples_per_s"]
            for (rep, c), res in done.items()
            if c == case and (rep, "ddp") in done
        ]
        med = lambda key: statistics.median(r[key] for r in mine)  # noqa: E731
        rows[case] = {
            "case": case,
            "samples_per_s": med("samples_per_s"),
            "samples_per_s_min": min(r["samples_per_s"] for r in mine),
            "samples_per_s_max": max(r["samples_per_s"] for r in mine),
            "eval_loss": med("eval_loss"),
            "bytes_per_step": med("bytes_per_step"),
            "comm_seconds_per_step": (
                statistics.median(r["comm_seconds"] / r["steps"] for r in mine)
                if mine[0]["comm_seconds"] is not None
                else None
            ),
            "repeats": len(mine),
        }
        if ratios:
            rows[case]["speedup_vs_ddp"] = statistics.median(ratios)
            rows[case]["speedup_min"], rows[case]["speedup_max"] = min(ratios), max(ratios)
    ddp = rows.get("ddp")
    for row in rows.values():
        if ddp is not None:
            row["eval_loss_vs_ddp"] = row["eval_loss"] / ddp["eval_loss"]
        if ddp is not None and "speedup_vs_ddp" in row:
            row["goal"] = goal(row, rows, link)
    return list(rows.values())


def speedup_bars(results: dict[str, list[dict[str, Any]]], ranks: int) -> Callable[[Any], None]:
    """The PNG: samples/s against DDP per case, one group of bars per link, eval loss over each bar."""

    def plot(ax: Any) -> None:
        links = [link for link in results if results[link]]
        width = 0.8 / max(len(links), 1)
        for k, link in enumerate(links):
            xs = [CASES.index(r["case"]) + k * width for r in results[link]]
            bars = ax.bar(xs, [r.get("speedup_vs_ddp", 0) for r in results[link]], width, label=f"link: {link}")
            for bar, r in zip(bars, results[link]):
                ax.annotate(
                    f"{r['eval_loss']:.3f}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                )
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(CASES))], CASES, fontsize=8)
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.axhline(1.3, color="grey", lw=0.5, ls="--")
        ax.set_ylabel("samples/s / DDP's (same link)")
        ax.set_title(f"char GPT (10.7M) on tiny Shakespeare, {ranks} ranks; eval loss over each bar")
        ax.legend(fontsize=7)

    return plot


def payload(
    args: argparse.Namespace,
    skipped: dict[str, str],
    repeats_done: int,
    results: dict[str, list[dict[str, Any]]],
    runs: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "model": "char GPT 6x384, context 64",
        "ranks": args.ranks,
        "steps": args.steps,
        "batch_per_rank": args.batch,
        "shaped_rate": SHAPED_RATE,
        "skipped": skipped,
        "repeats_done": repeats_done,
        "results": results,
        "runs": runs,
    }


def summarise_only(args: argparse.Namespace) -> None:
    """Medians, table and PNG again from the runs on disk, without `--drop`'s runs (kept under "dropped")."""
    from benchmarks.harness import RESULTS

    doc = json.loads(((args.results_dir or RESULTS) / f"{args.name}.json").read_text())
    drop = {tuple(d.split(":")) for d in args.drop}
    key = lambda r: (r["link"], r["case"], str(r["repeat"]))  # noqa: E731
    runs = [r for r in doc["runs"] if key(r) not in drop]
    dropped = doc.get("dropped", []) + [r for r in doc["runs"] if key(r) in drop]
    links = [lk for lk in LINKS if any(r["link"] == lk for r in runs)]
    results = {lk: summarise(runs, lk, CASES) for lk in links}
    args.steps, args.batch, args.ranks = doc["steps"], doc["batch_per_rank"], doc["ranks"]
    repeats = 1 + max(r["repeat"] for r in runs)
    for link in links:
        print(f"\n== link: {link} ({args.ranks} ranks, {args.steps} steps x {args.batch} x 64 characters per rank)")
        print(table(results[link], COLUMNS))
    save(
        args.name,
        {**payload(args, doc.get("skipped", {}), repeats, results, runs), "dropped": dropped},
        speedup_bars(results, args.ranks),
        args.results_dir,
    )


def add_launch_arguments(ap: argparse.ArgumentParser, name: str, steps: int, lock_help: str) -> None:
    """The arguments of a benchmark that launches the GPT worker per case (this one, benchmarks/diloco.py)."""
    ap.add_argument("--steps", type=int, default=steps, help="optimizer steps of every case")
    ap.add_argument("--batch", type=int, default=4, help="sequences of 64 characters per rank and step")
    ap.add_argument("--ranks", type=int, default=RANKS, help="ranks of every case (the goals are set at 4)")
    ap.add_argument("--links", nargs="+", default=list(LINKS), choices=LINKS)
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="holds tinyshakespeare/input.txt (default: the copy apps.train embeds)",
    )
    ap.add_argument("--lock", type=Path, default=None, help=lock_help)
    ap.add_argument("--timeout", type=float, default=900, help="seconds one case may take")
    ap.add_argument("--name", default=name, help="results/<name>.json and .png")
    ap.add_argument("--results-dir", type=Path, default=None, help="write there instead of benchmarks/results")


def data_and_links(args: argparse.Namespace) -> tuple[Path, list[str], dict[str, str]]:
    """(tiny Shakespeare's input.txt, the links to run, {link: why skipped}); exits naming a missing file."""
    data = EMBEDDED_TEXT if args.data_dir is None else args.data_dir / "tinyshakespeare" / "input.txt"
    if not data.is_file():
        raise SystemExit(f"--data-dir: {data} is not a file (tiny Shakespeare's input.txt is expected there)")
    links, skipped = list(args.links), {}
    if "shaped" in links and (reason := shaped_link.unavailable()) is not None:
        links.remove("shaped")
        skipped["shaped"] = reason
        print(f"skipping link shaped: {reason}", flush=True)
    return data, links, skipped


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.algorithms --model gpt", description=__doc__.split("\n\n")[0]
    )
    add_launch_arguments(ap, "algorithms_gpt", 120, "flock this file around each link of each repeat")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    ap.add_argument(
        "--summarise-only",
        action="store_true",
        help="re-summarise the runs in results/<name>.json (after an interrupted run) and draw the PNG",
    )
    ap.add_argument(
        "--drop",
        nargs="+",
        default=[],
        metavar="LINK:CASE:REPEAT",
        help="with --summarise-only: leave these runs out (e.g. measured with a since-fixed setting)",
    )
    args = ap.parse_args(argv)
    if args.summarise_only:
        return summarise_only(args)
    cases = args.cases if "ddp" in args.cases else ["ddp", *args.cases]
    data, links, skipped = data_and_links(args)
    runs: list[dict[str, Any]] = []
    results: dict[str, list[dict[str, Any]]] = {}
    for repeat in range(args.repeats):
        for link in links:
            with held(args.lock):  # one link's cases back to back: the same load for all of them
                for i in range(len(cases)):
                    case = cases[(i + repeat) % len(cases)]
                    try:
                        result = launch(case, link, args.steps, args.batch, data, args.timeout, ranks=args.ranks)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:  # recorded; the other cases go on
                        print(f"repeat {repeat} {link} {case} FAILED: {e}", flush=True)
                        runs.append({"repeat": repeat, "link": link, "case": case, "error": str(e)[-4000:]})
                        continue
                    print(
                        f"repeat {repeat} {link} {case}: {result['samples_per_s']:.2f} samples/s, "
                        f"eval loss {result['eval_loss']:.4f}",
                        flush=True,
                    )
                    runs.append({"repeat": repeat, "link": link, "case": case, "result": result})
                    results = {lk: summarise(runs, lk, cases) for lk in links}
                    save(args.name, payload(args, skipped, repeat, results, runs), results_dir=args.results_dir)
    for link in links:
        print(
            f"\n== link: {link} ({args.ranks} ranks, {args.steps} steps x {args.batch} x 64 characters per rank, "
            f"median of {args.repeats})"
        )
        print(table(results[link], COLUMNS))
    path = save(
        args.name,
        payload(args, skipped, args.repeats, results, runs),
        speedup_bars(results, args.ranks),
        args.results_dir,
    )
    print(f"\nwrote {path}", file=sys.stderr)
