"""apps.serve's cached incremental forward equals the GPT's full forward (float64), over pipeline
stages, ragged micro-batches (prefill and decode rows together) and reused slots; sampling and the
stream decoder (the scheduler's queue and cancellation: tests/apps/test_serve_scheduler.py)."""

from __future__ import annotations

import pytest
import torch

from apps.models.gpt import GPT
from apps.serve.kv_cache import Rows
from apps.serve.sampling import Sampler
from apps.serve.stage import Stage, split_layers
from apps.serve.text_codec import Vocabulary


def model() -> GPT:
    torch.manual_seed(0)
    return GPT(vocab_size=13, block_size=24, n_layer=3, n_head=4, n_embd=32, dropout=0.0).double().eval()


def test_split_layers() -> None:
    assert split_layers(6, 2) == [(0, 3), (3, 6)]
    assert split_layers(7, 3) == [(0, 3), (3, 5), (5, 7)]
    with pytest.raises(ValueError, match="1 to 6 pipeline stages"):
        split_layers(6, 7)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_cached_incremental_forward_equals_the_full_forward(stages: int) -> None:
    gpt = model()
    pipeline = [Stage(gpt, i, stages, slots=4) for i in range(stages)]
    g = torch.Generator().manual_seed(1)
    seqs = {slot: torch.randint(0, 13, (20,), generator=g) for slot in (0, 2, 3)}
    fed = {slot: 0 for slot in seqs}
    # (slot, new tokens) per micro-batch: prefill and decode rows mixed, one slot reused by a new sequence
    schedule = [
        [(0, 5), (2, 1)],
        [(0, 1), (2, 6), (3, 3)],
        [(3, 1)],
        [(0, 4), (2, 1), (3, 1)],
        ["reset", 2],
        [(2, 7), (0, 1)],
        [(2, 1), (3, 9), (0, 1)],
    ]
    for step in schedule:
        if step[0] == "reset":  # a new sequence in slot 2: the stale cache rows must not leak into it
            seqs[step[1]] = torch.randint(0, 13, (20,), generator=g)
            fed[step[1]] = 0
            continue
        width = max(n for _, n in step)
        tokens = torch.zeros(len(step), width, dtype=torch.long)
        for i, (slot, n) in enumerate(step):
            tokens[i, :n] = seqs[slot][fed[slot] : fed[slot] + n]
        rows = Rows(
            torch.tensor([s for s, _ in step]),
            torch.tensor([fed[s] for s, _ in step]),
            torch.tensor([n for _, n in step]),
            width,
        )
        x = tokens
        for stage in pipeline:
            x = stage.forward(x, rows)
        for i, (slot, n) in enumerate(step):
            fed[slot] += n
            with torch.no_grad():
                full = gpt(seqs[slot][None, : fed[slot]])[0, -1]
            torch.testing.assert_close(x[i], full, rtol=1e-10, atol=1e-10)


def test_intermediate_activations_equal_the_full_forward() -> None:
    gpt = model()
    first = Stage(gpt, 0, 3, slots=2)
    seq = torch.arange(10) % 13
    rows = Rows(torch.tensor([1]), torch.tensor([0]), torch.tensor([6]), 6)
    first.forward(seq[None, :6], rows)
    rows = Rows(torch.tensor([1]), torch.tensor([6]), torch.tensor([4]), 4)
    got = first.forward(seq[None, 6:], rows)
    with torch.no_grad():
        want = gpt.blocks[:1](gpt.tok(seq[None]) + gpt.pos(torch.arange(10)))[:, 6:]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_sampling_greedy_top1_and_seeds() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.9]] * 3)
    s = Sampler(3)
    assert s.sample(logits, [0, 1, 2], [0.0, 5.0, 5.0], [None, 1, 1], [1.0] * 3) == [1, 1, 1]  # T=0, top-1: argmax
    draws = []
    for _ in range(2):
        s.start(2, 1234)
        draws.append([s.sample(logits[:1], [2], [1.0], [None], [1.0])[0] for _ in range(20)])
    assert draws[0] == draws[1] and len(set(draws[0])) > 1


def test_stream_decoder_never_splits_a_character() -> None:
    euro = "\u20ac".encode()
    vocab = Vocabulary([bytes([b]) for b in euro] + [b"a"])  # a byte-level vocabulary
    dec = vocab.decoder()
    assert [dec.feed(i) for i in (3, 0, 1, 2, 3)] == ["a", "", "", "\u20ac", "a"]
    with pytest.raises(ValueError, match="not in the model's vocabulary"):
        Vocabulary("ab").encode("abc")
