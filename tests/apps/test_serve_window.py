"""Generation past the context: apps.serve's engine (one rank, in this process: the real scheduler,
stage, KV cache and sampler) generates greedily, in float64, several concurrent sequences far past
the model's block_size, and each equals a single-process reference written here from the rule as
documented (when the context would pass block_size, restart from the last `keep` tokens), which runs
the GPT's plain full forward over the window for every token. (Two stages over real ranks:
tests/apps/test_serve.py.)"""

from __future__ import annotations

import threading

import pytest
import torch

from apps.models.gpt import GPT
from apps.serve.engine import Engine, describe_stages
from apps.serve.scheduler import Request, Scheduler
from apps.serve.serve_metrics import ServeMetrics
from apps.serve.stage import Stage
from apps.serve.text_codec import Vocabulary

VOCAB, BLOCK = 13, 16


def window_reference(gpt: GPT, prompt: list[int], n: int, block: int, keep: int) -> list[int]:
    seq, start = list(prompt), 0
    with torch.no_grad():
        for _ in range(n):
            if len(seq) - start > block:
                start = len(seq) - keep
            seq.append(int(gpt(torch.tensor([seq[start:]]))[0, -1].argmax()))
    return seq[len(prompt) :]


def generate(gpt: GPT, prompts: list[list[int]], n: int, keep: int, slots: int) -> list[dict]:
    """Every prompt submitted at once to a one-rank engine; the final event of each."""
    scheduler = Scheduler(slots, len(prompts), 1, BLOCK, keep)
    engine = Engine(Stage(gpt, 0, 1, slots), None, scheduler, ServeMetrics(describe_stages(1, gpt.n_layer)))
    vocab = Vocabulary([chr(65 + i) for i in range(VOCAB)])
    finals: list[dict | None] = [None] * len(prompts)
    done = threading.Semaphore(0)

    def emit_for(i: int):
        def emit(event: dict) -> None:
            if event["done"]:
                finals[i] = event
                done.release()

        return emit

    for i, p in enumerate(prompts):
        scheduler.submit(Request(p, n, 0.0, None, i), vocab.decoder(), emit_for(i))
    engine.start()
    try:
        for _ in prompts:
            assert done.acquire(timeout=300), "the engine did not finish"
    finally:
        engine.stop()
    assert engine.error is None, engine.error
    return finals


@pytest.mark.parametrize("keep", [BLOCK // 2, BLOCK])  # the default; nanoGPT's idx[:, -block:]
def test_generation_past_the_context_equals_the_window_reference(keep: int) -> None:
    torch.manual_seed(0)
    gpt = GPT(vocab_size=VOCAB, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16, dropout=0.0).double().eval()
    g = torch.Generator().manual_seed(3)
    # a short prompt, one that fills the context exactly, one longer than it; 2 slots for 3 requests: one waits
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (3, BLOCK, BLOCK + 5)]
    n = 2 * BLOCK + 3
    finals = generate(gpt, prompts, n, keep, slots=2)
    for prompt, final in zip(prompts, finals):
        want = "".join(chr(65 + t) for t in window_reference(gpt, prompt, n, BLOCK, keep))
        assert final["full_text"] == want and final["num_tokens"] == n and final["finish_reason"] == "length"
        assert final["context_restarts"] >= 2, final  # the window moved more than once
