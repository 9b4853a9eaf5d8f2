"""Next-token sampling on the last stage: greedy at temperature 0, else softmax(logits / T) over
the top-k, drawn from a generator per sequence slot seeded by the request (so a seeded answer does
not depend on which other requests share its micro-batches)."""
from __future__ import annotations

import torch


class Sampler:
    def __init__(self, slots: int):
        self.generators = [torch.Generator() for _ in range(slots)]

    def start(self, slot: int, seed: int) -> None:
        self.generators[slot].manual_seed(seed)

    def sample(self, logits: torch.Tensor, slots: list[int], temperatures: list[float],
               top_ks: list[int | None]) -> list[int]:
        out = []
        for row, slot, temp, top_k in zip(logits.float(), slots, temperatures, top_ks):
            out.append(sample_one(row, temp, top_k, self.generators[slot]))
        return out


def sample_one(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator) -> int:
    if temperature == 0:
        return int(logits.argmax())
    logits = logits / temperature
    if top_k is not None and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))
