"""One rank of benchmarks/pipeline_inference.py's baseline: SmolCluster's model-parallel inference,
a star through rank 0 without a KV cache. For every token rank 0 runs stage 0 over the WHOLE
sequence, sends the activations to stage 1, gets its output back, sends that to stage 2, ... (every
hop goes through rank 0); the last stage returns the logits. Requests are served one after the other.
Same GPT and stage split as apps.serve. Past the context it feeds the last block_size tokens (nanoGPT's
crop). Rank 0 writes, per number of concurrent clients and repeat, tokens/s and each request's time to
first token (all requests arrive at time 0).
argv: OUT_JSON MAX_TOKENS REPEATS CLIENTS(comma-separated) [KEY=VALUE config overrides...] (greedy, the
benchmark's prompts)"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

import pycomm
from apps.serve.model_source import load
from apps.serve.stage import split_layers
from benchmarks.pipeline_inference import PROMPTS

STOP = torch.zeros(0)


def stage_forward(model, lo: int, hi: int, x: torch.Tensor, first: bool, last: bool) -> torch.Tensor:
    if first:
        x = model.tok(x) + model.pos(torch.arange(x.shape[1]))
    x = model.blocks[lo:hi](x)
    return model.head(model.norm(x[:, -1])) if last else x


def main() -> None:
    out, max_tokens, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    clients, overrides = [int(c) for c in sys.argv[4].split(",")], sys.argv[5:]
    comm = pycomm.init()
    torch.set_grad_enabled(False)
    served = load(None, overrides)
    model, vocab = served.model, served.vocab
    bounds = split_layers(model.n_layer, comm.size)
    lo, hi = bounds[comm.rank]
    last = comm.rank == comm.size - 1
    if comm.rank > 0:
        while True:
            x = comm.recv_tensor(0).tensor
            if x.numel() == 0:
                return
            comm.send_tensor(stage_forward(model, lo, hi, x, False, last), 0)

    def generate(prompt: str) -> tuple[float, int]:
        """Returns (seconds to the first token from the call, tokens)."""
        idx = torch.tensor([[vocab.index(c) for c in prompt]])
        start, first = time.perf_counter(), None
        for _ in range(max_tokens):
            x = stage_forward(model, lo, hi, idx[:, -model.block_size :], True, comm.size == 1)
            for s in range(1, comm.size):  # through rank 0: to stage s and back
                comm.send_tensor(x, s)
                x = comm.recv_tensor(s).tensor
            idx = torch.cat([idx, x.argmax(-1, keepdim=True)], dim=1)
            first = first or time.perf_counter() - start
        return first, max_tokens

    generate(PROMPTS[0])  # warm-up
    results = {}
    for n in clients:
        rounds = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ttfts, tokens = [], 0
            for i in range(n):  # one request at a time; request i waited for the ones before it
                began = time.perf_counter() - t0
                ttft, got = generate(PROMPTS[i % len(PROMPTS)])
                ttfts.append(began + ttft)
                tokens += got
            wall = time.perf_counter() - t0
            rounds.append({"tokens_per_s": tokens / wall, "ttft_ms": 1e3 * statistics.median(ttfts)})
        results[n] = rounds
    for s in range(1, comm.size):
        comm.send_tensor(STOP, s)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
