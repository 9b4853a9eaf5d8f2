"""Pipelined GPT inference: tokens/s and time to first token for 1, 16 and 64 concurrent clients,
within the context and past it.

  pipeline  python -m apps.serve --nproc 2 (KV cache per stage, stage-to-stage activations,
            micro-batched continuous batching), over HTTP: each client streams POST /v1/completions
            with the official openai client
  single    python -m apps.serve --nproc 1: the same server on one process (no pipeline)
  star      SmolCluster's design, written minimally in benchmarks/workers/star_inference.py: 2 ranks,
            no cache, rank 0 sends the whole sequence's activations to every stage for every token,
            requests one after the other; measured in-process (no HTTP: in its favour)

Two cases: `within` (--max-tokens, default 32, inside the default GPT's 256-token context) and
`past` (generation past the context: 2x the block size of the same GPT served with
--past-block-size, default 64, so 128 tokens; the servers restart the window from its last half
(apps/serve/README.md), the star crops to the last block_size tokens as nanoGPT does).

Greedy decoding of the default GPT (random weights: speed does not depend on them), the same prompts
everywhere; all clients start together. tokens/s = all tokens / wall time of the round; time to
first token = median over the clients (a queued client's waiting counts). Median of --repeats rounds.
Writes results/pipeline_inference.json and .png; ratios against star and single at the same case
and clients.

    python -m benchmarks.pipeline_inference [--max-tokens 32] [--repeats 3] [--clients 1 16 64]
    python -m benchmarks.pipeline_inference --quick      # 2 layers, 128 wide, 1 and 4 clients: a smoke run"""

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

from benchmarks.harness import save, table

PROMPTS = [
    "ROMEO:",
    "JULIET:\nO Romeo",
    "First Citizen:\nBefore we proceed",
    "KING RICHARD II:\n",
    "To be, or not to be",
    "HAMLET:\nWhat a piece of work",
    "MENENIUS:\nWhy, masters",
    "LADY MACBETH:\n",
]
MODEL = "bench"
CASES = ("within", "past")


def openai_round(url: str, clients: int, max_tokens: int) -> dict[str, float]:
    """`clients` concurrent streams of POST /v1/completions started together; tokens/s and median TTFT (ms)."""
    import openai

    start = threading.Barrier(clients + 1)
    ttft: list[float] = [0.0] * clients
    tokens = [0] * clients
    errors: list[BaseException] = []
    t0 = [0.0]

    def client(i: int) -> None:
        try:
            with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=3600) as c:
                start.wait()
                for chunk in c.completions.create(
                    model=MODEL,
                    prompt=PROMPTS[i % len(PROMPTS)],
                    max_tokens=max_tokens,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                ):
                    if chunk.choices and chunk.choices[0].text and not ttft[i]:
                        ttft[i] = time.perf_counter() - t0[0]
                    if chunk.usage is not None:
                        tokens[i] = chunk.usage.completion_tokens
        except BaseException as e:  # reported below: a failed client must not hang the round
            errors.append(e)
            raise

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    t0[0] = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0[0]
    if errors or sum(tokens) != clients * max_tokens:
        raise RuntimeError(f"a client failed ({errors[:1]}) or tokens are missing: {tokens}")
    return {"tokens_per_s": sum(tokens) / wall, "ttft_ms": 1e3 * statistics.median(ttft)}


def served(nproc: int, clients: list[int], max_tokens: int, repeats: int, overrides: list[str]) -> dict[int, list]:
    from benchmarks.serve_process import serving

    args = ["--nproc", str(nproc), "--slots", str(max(clients)), "--model-name", MODEL]
    with serving(*args, *[a for o in overrides for a in ("-o", o)]) as server:
        openai_round(server.url, 1, max_tokens)  # warm-up
        return {n: [openai_round(server.url, n, max_tokens) for _ in range(repeats)] for n in clients}


def star(clients: list[int], max_tokens: int, repeats: int, overrides: list[str]) -> dict[int, list]:
    from benchmarks.run_ranks import mpirun

    out = Path(tempfile.mkdtemp(prefix="bench-star-")) / "star.json"
    mpirun(
        2,
        "benchmarks.workers.star_inference",
        str(out),
        str(max_tokens),
        str(repeats),
        ",".join(map(str, clients)),
        *overrides,
        timeout=6 * 3600,
    )
    return {int(k): v for k, v in json.loads(out.read_text()).items()}


def summarize(case: str, system: str, rounds: dict[int, list], max_tokens: int, block: int) -> list[dict[str, Any]]:
    return [
        {
            "case": case,
            "system": system,
            "clients": n,
            "max_tokens": max_tokens,
            "block_size": block,
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
            "ttft_ms": statistics.median(r["ttft_ms"] for r in rs),
            "repeats": len(rs),
        }
        for n, rs in rounds.items()
    ]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    by = {(r["case"], r["system"], r["clients"]): r for r in rows}
    for r in rows:
        for peer in ("star", "single"):
            p = by.get((r["case"], peer, r["clients"]))
            if p and r["system"] != peer:
                r[f"speed_vs_{peer}"] = r["tokens_per_s"] / p["tokens_per_s"]


def plot(rows: list[dict[str, Any]]):
    def draw(ax) -> None:
        fig = ax.figure
        fig.set_size_inches(13, 5)
        ax.remove()
        for k, case in enumerate(CASES):
            ax = fig.add_subplot(1, 2, k + 1)
            twin = ax.twinx()
            for system, color in (("pipeline", "tab:blue"), ("single", "tab:green"), ("star", "tab:red")):
                rs = [r for r in rows if r["system"] == system and r["case"] == case]
                if not rs:
                    continue
                x = [r["clients"] for r in rs]
                ax.plot(x, [r["tokens_per_s"] for r in rs], "o-", color=color, label=f"{system}: tokens/s")
                twin.plot(x, [r["ttft_ms"] for r in rs], "s--", color=color, alpha=0.6, label=f"{system}: TTFT")
            some = next((r for r in rows if r["case"] == case), None)
            what = f"{some['max_tokens']} tokens, context {some['block_size']}" if some else ""
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent clients (openai client, /v1/completions, streamed)")
            ax.set_ylabel("tokens/s (solid)")
            twin.set_ylabel("time to first token, ms (dashed)")
            twin.set_yscale("log")
            ax.set_title(f"{case} the context ({what}), median", fontsize=10)
            lines, more = ax.get_legend_handles_labels(), twin.get_legend_handles_labels()
            ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")
        fig.suptitle("GPT inference: apps.serve pipeline vs single process vs SmolCluster's no-cache star")

    return draw


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per request within the context")
    ap.add_argument(
        "--past-block-size",
        type=int,
        default=64,
        help="the past case serves the same GPT with this context and asks for twice as many tokens",
    )
    ap.add_argument("--repeats", type=int, default=3)
    systems = ["pipeline", "single", "star"]
    ap.add_argument("--systems", nargs="+", default=systems, choices=systems)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--quick", action="store_true", help="a small GPT (2 layers, 128 wide), 1 and 4 clients, 1 repeat")
    ap.add_argument("--results-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    base = ["model.options.n_layer=2", "model.options.n_embd=128", "model.options.n_head=4"] if a.quick else []
    if a.quick:
        a.clients, a.repeats, a.max_tokens = [1, 4], 1, 8
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()  # shared machines: the figures mean little under a high load
    for case in a.cases:
        block = 256 if case == "within" else a.past_block_size  # 256: gpt_shakespeare_char.yaml's context
        overrides = base + ([f"data.options.block_size={block}"] if case == "past" else [])
        max_tokens = a.max_tokens if case == "within" else 2 * block
        for system in a.systems:
            if system == "star":
                rounds = star(a.clients, max_tokens, a.repeats, overrides)
            else:
                rounds = served(2 if system == "pipeline" else 1, a.clients, max_tokens, a.repeats, overrides)
            rows += summarize(case, system, rounds, max_tokens, block)
    add_ratios(rows)
    print(
        table(
            rows,
            ["case", "system", "clients", "max_tokens", "tokens_per_s", "ttft_ms", "speed_vs_star", "speed_vs_single"],
        )
    )
    print(f"load average (1 min) before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    payload = {
        "max_tokens": a.max_tokens,
        "past_block_size": a.past_block_size,
        "repeats": a.repeats,
        "quick": a.quick,
        "rows": rows,
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "model": "apps/configs/gpt_shakespeare_char.yaml GPT (random weights)" if not a.quick else "GPT 2 layers x 128",
        "note": __doc__,
    }
    save("pipeline_inference", payload, plot(rows), a.results_dir)
    return payload


if __name__ == "__main__":
    main()
