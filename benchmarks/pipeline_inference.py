"""Pipelined GPT inference: tokens/s and time to first token for 1, 4 and 16 concurrent clients.

  pipeline  python -m apps.serve --nproc 2 (KV cache per stage, stage-to-stage activations,
            micro-batched continuous batching), over HTTP: each client streams POST /chat
  single    python -m apps.serve --nproc 1: the same server on one process (no pipeline)
  star      SmolCluster's design, written minimally in benchmarks/workers/star_inference.py: 2 ranks,
            no cache, rank 0 sends the whole sequence's activations to every stage for every token,
            requests one after the other; measured in-process (no HTTP: in its favour)

Greedy decoding of the default GPT (random weights: speed does not depend on them), the same prompts
everywhere; all clients start together. tokens/s = all tokens / wall time of the round; time to
first token = median over the clients (a queued client's waiting counts). Median of --repeats rounds.
Writes results/pipeline_inference.json and .png; ratios against star and single at the same clients.

    python -m benchmarks.pipeline_inference [--max-tokens 32] [--repeats 3] [--clients 1 4 16]
    python -m benchmarks.pipeline_inference --quick      # 2 layers, 128 wide: a smoke run"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import save, table

PROMPTS = ["ROMEO:", "JULIET:\nO Romeo", "First Citizen:\nBefore we proceed", "KING RICHARD II:\n",
           "To be, or not to be", "HAMLET:\nWhat a piece of work", "MENENIUS:\nWhy, masters", "LADY MACBETH:\n"]


def http_round(url: str, clients: int, max_tokens: int) -> dict[str, float]:
    """`clients` concurrent streams of POST /chat started together; tokens/s and median TTFT (ms)."""
    start = threading.Barrier(clients + 1)
    ttft: list[float] = [0.0] * clients
    tokens = [0] * clients
    t0 = [0.0]

    def client(i: int) -> None:
        body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens, "temperature": 0}
        with httpx.Client(base_url=url, timeout=600) as c:
            start.wait()
            with c.stream("POST", "/chat", json=body) as r:
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    event = json.loads(line[5:])
                    if not event["done"] and not ttft[i]:
                        ttft[i] = time.perf_counter() - t0[0]
                    if event["done"]:
                        assert "error" not in event, event
                        tokens[i] = event["num_tokens"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    t0[0] = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0[0]
    return {"tokens_per_s": sum(tokens) / wall, "ttft_ms": 1e3 * statistics.median(ttft)}


def served(nproc: int, clients: list[int], max_tokens: int, repeats: int, overrides: list[str]) -> dict[int, list]:
    from benchmarks.serve_process import serving

    args = ["--nproc", str(nproc), "--slots", str(max(clients))] + [a for o in overrides for a in ("-o", o)]
    with serving(*args) as server:
        http_round(server.url, 1, max_tokens)   # warm-up
        return {n: [http_round(server.url, n, max_tokens) for _ in range(repeats)] for n in clients}


def star(clients: list[int], max_tokens: int, repeats: int, overrides: list[str]) -> dict[int, list]:
    from benchmarks.run_ranks import mpirun

    if overrides:
        raise SystemExit("--quick sizes are for the served cases only; run the star at the default size")
    out = Path(tempfile.mkdtemp(prefix="bench-star-")) / "star.json"
    mpirun(2, "benchmarks.workers.star_inference", str(out), str(max_tokens), str(repeats), *map(str, clients),
           timeout=3600)
    return {int(k): v for k, v in json.loads(out.read_text()).items()}


def summarize(system: str, rounds: dict[int, list]) -> list[dict[str, Any]]:
    return [{"system": system, "clients": n,
             "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
             "ttft_ms": statistics.median(r["ttft_ms"] for r in rs), "repeats": len(rs)} for n, rs in rounds.items()]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    by = {(r["system"], r["clients"]): r for r in rows}
    for r in rows:
        for peer in ("star", "single"):
            p = by.get((peer, r["clients"]))
            if p and r["system"] != peer:
                r[f"speed_vs_{peer}"] = r["tokens_per_s"] / p["tokens_per_s"]


def plot(rows: list[dict[str, Any]]):
    def draw(ax) -> None:
        twin = ax.twinx()
        for system, color in (("pipeline", "tab:blue"), ("single", "tab:green"), ("star", "tab:red")):
            rs = [r for r in rows if r["system"] == system]
            if not rs:
                continue
            x = [r["clients"] for r in rs]
            ax.plot(x, [r["tokens_per_s"] for r in rs], "o-", color=color, label=f"{system}: tokens/s")
            twin.plot(x, [r["ttft_ms"] for r in rs], "s--", color=color, alpha=0.6, label=f"{system}: TTFT")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("tokens/s (solid)")
        twin.set_ylabel("time to first token, ms (dashed)")
        twin.set_yscale("log")
        ax.set_title("GPT inference: apps.serve pipeline vs single process vs no-cache star (median)")
        lines = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    return draw


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    systems = ["pipeline", "single", "star"]
    ap.add_argument("--systems", nargs="+", default=systems, choices=systems)
    ap.add_argument("--quick", action="store_true", help="a small GPT (2 layers, 128 wide) for pipeline and single")
    ap.add_argument("--results-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    overrides = ["model.options.n_layer=2", "model.options.n_embd=128", "model.options.n_head=4"] if a.quick else []
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()   # shared machines: the figures mean little under a high load
    for system in a.systems:
        if system == "star":
            rounds = star(a.clients, a.max_tokens, a.repeats, overrides)
        else:
            rounds = served(2 if system == "pipeline" else 1, a.clients, a.max_tokens, a.repeats, overrides)
        rows += summarize(system, rounds)
    add_ratios(rows)
    print(table(rows, ["system", "clients", "tokens_per_s", "ttft_ms", "speed_vs_star", "speed_vs_single"]))
    print(f"load average (1 min) before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    save("pipeline_inference", {"max_tokens": a.max_tokens, "repeats": a.repeats, "quick": a.quick, "rows": rows,
                                "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
                                "model": "apps/configs/gpt_shakespeare_char.yaml GPT (random weights)"
                                if not a.quick else "GPT 2 layers x 128", "note": __doc__},
         plot(rows), a.results_dir)


if __name__ == "__main__":
    main()
