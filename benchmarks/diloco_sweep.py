"""DiLoCo's outer step and period swept on the char GPT: does any setting close the loss gap to mbsgd at
>= 200x fewer bytes (benchmarks/diloco.py's goal, unmet by the papers' outer step in results/diloco_long.json)?

`python -m benchmarks.diloco_sweep`: benchmarks/diloco.py's runs (4 ranks, the 0.8M-parameter char GPT,
AdamW lr 2e-3 with warm-up and cosine to lr/10, 4 sequences x 64 characters per rank and step, default
link), 2048 steps and seed 0 as in diloco_long, mbsgd once and each VARIANT once. The loss is
deterministic for a seed (the same data order and initial model in every run), so one run per variant
measures it; samples/s is reported but not the point here. Writes results/diloco_sweep.json and .png (eval
loss against bytes sent, log axis). `--steps 8 --variants diloco-h64+int8` checks it end to end."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any, Callable

from benchmarks.algorithms_gpt import add_launch_arguments, data_and_links, launch
from benchmarks.diloco import COLUMNS, REFERENCE, add_model_arguments, model_options, summarise
from benchmarks.harness import held, save, table
from benchmarks.workers.algorithms_gpt_run import ADAMW, warmup_steps

# variant -> (the worker's case, overrides of its DiLoCo options); the case's own: outer lr 0.7, momentum 0.9,
# Nesterov. Every variant sends >= 200x fewer bytes than mbsgd at 2048 steps (32 int8 rounds, about 64
# int4 rounds, up to 256 1-bit rounds).
VARIANTS: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {
    "diloco-h64+int8": ("diloco-h64+int8", lambda steps: {}),
    "diloco-h64+int8 outer_lr 0.4": ("diloco-h64+int8", lambda steps: {"outer_lr": 0.4}),
    "diloco-h64+int8 outer_lr 1.0": ("diloco-h64+int8", lambda steps: {"outer_lr": 1.0}),
    # outer lr 1 without momentum is plain periodic averaging (local SGD with AdamW inside)
    "diloco-h64+int8 outer_lr 1.0 momentum 0": (
        "diloco-h64+int8",
        lambda steps: {"outer_lr": 1.0, "outer_momentum": 0.0},
    ),
    "diloco-h32+int4": ("diloco-h16+int4", lambda steps: {"inner_steps": 32}),
    # shorter periods, paid for with 1-bit outer gradients (error feedback per rank): 128 and 256 rounds
    "diloco-h16+onebit": ("diloco-h16+onebit", lambda steps: {}),
    "diloco-h8+onebit": ("diloco-h16+onebit", lambda steps: {"inner_steps": 8}),
    # QSR's period: H 16 through the warm-up, then (4 lr_peak / lr)^2 (16 at the peak, growing as the cosine
    # decays): about 63 rounds at 2048 steps, short ones while the lr is high
    "diloco-qsr+int4": (
        "diloco-h16+int4",
        lambda steps: {
            "inner_steps": "qsr",
            "h_base": 16,
            "alpha": 4 * ADAMW["lr"],
            "total_steps": steps,
            "warmup_steps": warmup_steps(steps),
        },
    ),
}


def plot_loss_against_bytes(rows: list[dict[str, Any]], args: argparse.Namespace) -> Callable[[Any], None]:
    def plot(ax: Any) -> None:
        for i, row in enumerate(rows):
            ax.plot([max(row["bytes_sent"], 1)], [row["eval_loss"]], "os^"[i // 10], ms=7, label=row["case"])
        ax.set_xscale("log")
        ax.set_xlabel("bytes sent per rank during training")
        ax.set_ylabel("eval loss (seed 0)")
        ax.legend(fontsize=7)
        ax.set_title(
            f"DiLoCo settings, char GPT {args.n_layer}x{args.n_embd}, {args.ranks} ranks, {args.steps} "
            f"steps x {args.batch} x 64 characters per rank",
            fontsize=9,
        )

    return plot


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.diloco_sweep", description=__doc__.split("\n\n")[0])
    add_launch_arguments(ap, "diloco_sweep", 2048, "flock this file around the whole sweep")
    add_model_arguments(ap)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args(argv)
    data, _, _ = data_and_links(argparse.Namespace(**{**vars(args), "links": ["default"]}))
    settings = {"seed": 0, "model": model_options(args)}
    names = [REFERENCE, *args.variants]
    runs: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    with held(args.lock):
        for name in names:
            case, overrides = VARIANTS[name] if name in VARIANTS else (name, lambda steps: {})
            options = overrides(args.steps)
            try:
                result = launch(
                    case, "default", args.steps, args.batch, data, args.timeout, options, args.ranks, settings
                )
            except (RuntimeError, subprocess.TimeoutExpired) as e:  # recorded; the others go on
                print(f"{name} FAILED: {e}", flush=True)
                runs.append({"seed": 0, "link": "default", "case": name, "options": options, "error": str(e)[-4000:]})
                continue
            print(f"{name}: eval loss {result['eval_loss']:.4f}, {result['bytes_sent']:.3g} bytes sent", flush=True)
            runs.append({"seed": 0, "link": "default", "case": name, "options": options, "result": result})
            rows = summarise(runs, "default", names)
            save(args.name, payload(args, rows, runs), results_dir=args.results_dir)
    print(table(rows, COLUMNS))
    path = save(args.name, payload(args, rows, runs), plot_loss_against_bytes(rows, args), args.results_dir)
    print(f"\nwrote {path}", file=sys.stderr)


def payload(args: argparse.Namespace, rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": {"n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head, "context": 64},
        "ranks": args.ranks,
        "steps": args.steps,
        "batch_per_rank": args.batch,
        "seed": 0,
        "reference": REFERENCE,
        "results": rows,
        "runs": runs,
    }


if __name__ == "__main__":
    main()
