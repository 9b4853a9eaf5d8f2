"""Next-token sampling on the last stage: greedy at temperature 0 (and at or below GREEDY_BELOW),
else softmax((logits - max) / T) in float64 over the top-k, then the nucleus (top-p), drawn from a
generator per sequence slot seeded by the request (so a seeded answer does not depend on which
other requests share its micro-batches).

It cannot fail on any checked request: logits are shifted by their maximum before the division, so
every scaled logit is <= 0 and the largest is exactly 0 (no overflow whatever T); the probabilities
are computed in float64 and the most likely token always keeps a positive one. A model that
produces NaN logits (a broken checkpoint) has them treated as -inf (all NaN: token 0), +inf as the
largest float."""

from __future__ import annotations

import torch

GREEDY_BELOW = 1e-5  # temperatures at or below this sample greedily (documented in apps/serve/README.md)


class Sampler:
    def __init__(self, slots: int):
        self.generators = [torch.Generator() for _ in range(slots)]

    def start(self, slot: int, seed: int) -> None:
        self.generators[slot].manual_seed(seed)

    def sample(
        self,
        logits: torch.Tensor,
        slots: list[int],
        temperatures: list[float],
        top_ks: list[int | None],
        top_ps: list[float],
    ) -> list[int]:
        return [
            sample_one(row, temp, top_k, top_p, self.generators[slot])
            for row, slot, temp, top_k, top_p in zip(logits, slots, temperatures, top_ks, top_ps)
        ]


def sample_one(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float, generator: torch.Generator
) -> int:
    logits = torch.nan_to_num(logits.double(), nan=float("-inf"))
    if temperature <= GREEDY_BELOW or logits.max() == float("-inf"):
        return int(logits.argmax())
    scaled = (logits - logits.max()) / temperature
    if top_k is not None and top_k < scaled.numel():
        kth = torch.topk(scaled, top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        ordered, order = probs.sort(descending=True)
        before = ordered.cumsum(0) - ordered  # probability of the tokens ranked above
        probs = torch.zeros_like(probs).scatter(0, order, ordered.masked_fill(before > top_p, 0.0))
    return int(torch.multinomial(probs, 1, generator=generator))
