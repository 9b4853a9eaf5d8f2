"""DiLoCo against synchronous and local SGD: eval loss against the bytes each rank sent, and samples/s.

`python -m benchmarks.diloco`: the char GPT on tiny Shakespeare, 4 ranks, the same optimizer steps,
samples, data order, AdamW and cosine schedule for every case (benchmarks/workers/algorithms_gpt_run.py):
mbsgd (DDP's update: the reference), plsgd (H = 6), qsr, diloco with H = 16 and 64, diloco H = 64 with
int8 and with int4 outer gradients, and streaming diloco (H = 64, F = 4 fragments, one step of overlap,
mixing 0.5). Each case runs once per seed (initial model and data order) on the default link and on the
shaped 10 Gbit/s link (benchmarks/shaped_link.py; root only, skipped with the reason elsewhere).

Reported per case and link (medians over the seeds of per-seed ratios against mbsgd of the same seed and
link): eval loss, bytes sent per rank during training (the payload handed to collectives, a codec's
compressed size; the initial broadcast, the same for all, left out) and how many times fewer than
mbsgd's, samples/s. The goal: eval loss within 2% of mbsgd's while sending >= 200x fewer
bytes. Writes results/diloco.json (rewritten after every run: an interrupted run keeps what it measured)
and results/diloco.png (eval loss against bytes, log axis; samples/s against mbsgd per link).

Size: every run is one launch of 4 ranks. The default (a 4-layer, 128-wide GPT of 0.8M parameters, 256
steps of 4 sequences x 64 characters per rank, 3 seeds, both links: 48 runs) is sized to take at most
about 45 minutes on an idle 2-core machine (each run prints the pace and the time left);
--steps / --batch / --n-layer / --n-embd / --seeds / --links / --cases change it (`--steps 4 --seeds 1
--links default` checks that it runs end to end in a few minutes)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from benchmarks.algorithms_gpt import add_launch_arguments, data_and_links, launch
from benchmarks.harness import held, save, table

CASES = ["mbsgd", "plsgd", "qsr", "diloco-h16", "diloco-h64", "diloco-h64+int8", "diloco-h64+int4", "streaming-f4"]
REFERENCE = "mbsgd"
LOSS_GOAL, BYTES_GOAL = 1.02, 200.0  # eval loss <= 1.02x the reference's, >= 200x fewer bytes
COLUMNS = [
    "case",
    "eval_loss",
    "eval_loss_vs_mbsgd",
    "bytes_sent",
    "fewer_bytes_than_mbsgd",
    "samples_per_s",
    "speedup_vs_mbsgd",
    "seeds",
    "goal",
]


def summarise(runs: list[dict[str, Any]], link: str, cases: list[str]) -> list[dict[str, Any]]:
    """Per case on `link`: medians over the seeds, and medians of the per-seed ratios to the reference."""
    done = {(r["seed"], r["case"]): r["result"] for r in runs if r["link"] == link and "result" in r}
    rows = []
    for case in cases:
        mine = {seed: res for (seed, c), res in done.items() if c == case}
        if not mine:
            continue
        med = lambda key: statistics.median(r[key] for r in mine.values())  # noqa: E731
        row: dict[str, Any] = {
            "case": case,
            "eval_loss": med("eval_loss"),
            "bytes_sent": med("bytes_sent"),
            "samples_per_s": med("samples_per_s"),
            "seeds": len(mine),
            "eval_loss_per_seed": [mine[s]["eval_loss"] for s in sorted(mine)],
        }
        refs = {s: done[(s, REFERENCE)] for s in mine if (s, REFERENCE) in done}
        if refs:
            ratio = lambda f: statistics.median(f(mine[s], refs[s]) for s in refs)  # noqa: E731
            row["eval_loss_vs_mbsgd"] = ratio(lambda r, d: r["eval_loss"] / d["eval_loss"])
            row["speedup_vs_mbsgd"] = ratio(lambda r, d: r["samples_per_s"] / d["samples_per_s"])
            row["fewer_bytes_than_mbsgd"] = ratio(lambda r, d: d["bytes_sent"] / max(r["bytes_sent"], 1))
            if case.startswith(("diloco", "streaming")):
                met = row["eval_loss_vs_mbsgd"] <= LOSS_GOAL and row["fewer_bytes_than_mbsgd"] >= BYTES_GOAL
                row["goal"] = f"loss <= {LOSS_GOAL:g}x, >= {BYTES_GOAL:g}x fewer bytes: {'met' if met else 'NOT met'}"
        rows.append(row)
    return rows


def plot_loss_and_speed(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> Callable[[Any], None]:
    """Left: eval loss against bytes sent per rank (log axis), one point per case with its seeds' range.
    Right: samples/s against mbsgd per case, one bar per link."""

    def plot(ax: Any) -> None:
        fig = ax.figure
        fig.set_size_inches(13, 5)
        ax.remove()
        left, right = fig.subplots(1, 2)
        first = next((rows for rows in results.values() if rows), [])
        for i, row in enumerate(first):
            losses = row["eval_loss_per_seed"]
            left.errorbar(
                [max(row["bytes_sent"], 1)],
                [row["eval_loss"]],
                fmt="os"[i >= 10],
                ms=6,
                yerr=[[row["eval_loss"] - min(losses)], [max(losses) - row["eval_loss"]]],
                label=row["case"],
            )
        left.set_xscale("log")
        left.set_xlabel("bytes sent per rank during training")
        left.set_ylabel(f"eval loss (median of {args.seeds} seeds, range)")
        left.legend(fontsize=7)
        links = [link for link in results if results[link]]
        shown = [c for c in CASES if any(r["case"] == c for link in links for r in results[link])]
        width = 0.8 / max(len(links), 1)
        for k, link in enumerate(links):
            rows = [r for r in results[link] if "speedup_vs_mbsgd" in r]
            right.bar(
                [shown.index(r["case"]) + k * width for r in rows],
                [r["speedup_vs_mbsgd"] for r in rows],
                width,
                label=f"link: {link}",
            )
        right.set_xticks([i + 0.4 - width / 2 for i in range(len(shown))], shown, fontsize=7, rotation=30)
        right.axhline(1.0, color="grey", lw=0.5)
        right.set_ylabel("samples/s / mbsgd's (same seed and link)")
        right.legend(fontsize=7)
        fig.suptitle(
            f"char GPT {args.n_layer}x{args.n_embd} on tiny Shakespeare, {args.ranks} ranks, "
            f"{args.steps} steps x {args.batch} x 64 characters per rank"
        )

    return plot


def payload(
    args: argparse.Namespace,
    skipped: dict[str, str],
    results: dict[str, list[dict[str, Any]]],
    runs: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "model": {"n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head, "context": 64},
        "ranks": args.ranks,
        "steps": args.steps,
        "batch_per_rank": args.batch,
        "seeds": args.seeds,
        "reference": REFERENCE,
        "goal": {"eval_loss_vs_mbsgd_at_most": LOSS_GOAL, "fewer_bytes_at_least": BYTES_GOAL},
        "shaped_rate": "10gbit",
        "skipped": skipped,
        "results": results,
        "runs": runs,
    }


def add_model_arguments(ap: argparse.ArgumentParser) -> None:
    """The GPT's size (this benchmark's and benchmarks/diloco_sweep.py's; model_options reads them)."""
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-head", type=int, default=4)


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The worker's overrides of its GPT (settings["model"]), from add_model_arguments' arguments."""
    return {"n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head, "dropout": 0.0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.diloco", description=__doc__.split("\n\n")[0])
    add_launch_arguments(ap, "diloco", 256, "flock this file around each seed's runs on a link")
    add_model_arguments(ap)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (initial model and data order)")
    ap.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    args = ap.parse_args(argv)
    cases = args.cases if REFERENCE in args.cases else [REFERENCE, *args.cases]
    data, links, skipped = data_and_links(args)
    model = model_options(args)
    runs: list[dict[str, Any]] = []
    results: dict[str, list[dict[str, Any]]] = {}
    total, started = args.seeds * len(links) * len(cases), time.monotonic()
    for seed in range(args.seeds):
        for link in links:
            with held(args.lock):  # one seed's cases on one link back to back: the same load for all
                for i in range(len(cases)):
                    case = cases[(i + seed) % len(cases)]  # rotated: no case always follows another
                    try:
                        result = launch(
                            case,
                            link,
                            args.steps,
                            args.batch,
                            data,
                            args.timeout,
                            ranks=args.ranks,
                            settings={"seed": seed, "model": model},
                        )
                    except (RuntimeError, subprocess.TimeoutExpired) as e:  # recorded; the others go on
                        print(f"seed {seed} {link} {case} FAILED: {e}", flush=True)
                        runs.append({"seed": seed, "link": link, "case": case, "error": str(e)[-4000:]})
                        continue
                    pace = (time.monotonic() - started) / (len(runs) + 1)
                    print(
                        f"seed {seed} {link} {case}: eval loss {result['eval_loss']:.4f}, {result['bytes_sent']:.3g} "
                        f"bytes sent, {result['samples_per_s']:.1f} samples/s ({pace:.0f} s per run, about "
                        f"{pace * (total - len(runs) - 1) / 60:.0f} min left)",
                        flush=True,
                    )
                    runs.append({"seed": seed, "link": link, "case": case, "result": result})
                    results = {lk: summarise(runs, lk, cases) for lk in links}
                    save(args.name, payload(args, skipped, results, runs), results_dir=args.results_dir)
    for link in links:
        print(
            f"\n== link: {link} ({args.ranks} ranks, {args.steps} steps x {args.batch} x 64 characters per rank, "
            f"median of {args.seeds} seeds)"
        )
        print(table(results.get(link, []), COLUMNS))
    path = save(args.name, payload(args, skipped, results, runs), plot_loss_and_speed(results, args), args.results_dir)
    print(f"\nwrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
