"""One pipeline stage of the served GPT: a contiguous run of its blocks with their KV cache; the
first stage also embeds tokens, the last also applies the final norm and the head (tied to the
token embedding) to each row's last valid position."""

from __future__ import annotations

import torch

from apps.models.gpt import GPT
from apps.serve.kv_cache import KVCache, Rows, cached_blocks_forward


def split_layers(n_layer: int, stages: int) -> list[tuple[int, int]]:
    """[lo, hi) block ranges of `stages` stages, as even as possible (earlier stages get the extra ones)."""
    if not 1 <= stages <= n_layer:
        raise ValueError(
            f"--nproc {stages}: the GPT has {n_layer} blocks, so 1 to {n_layer} pipeline stages "
            f"(one rank each) are possible"
        )
    base, extra = divmod(n_layer, stages)
    bounds, lo = [], 0
    for s in range(stages):
        hi = lo + base + (s < extra)
        bounds.append((lo, hi))
        lo = hi
    return bounds


class Stage:
    def __init__(self, model: GPT, index: int, count: int, slots: int):
        self.index, self.count = index, count
        self.first, self.last = index == 0, index == count - 1
        self.layers = split_layers(model.n_layer, count)[index]
        self.model = model  # weights of the other stages are simply never used
        self.blocks = model.blocks[self.layers[0] : self.layers[1]]
        self.cache = KVCache.for_blocks(self.blocks, slots, model.block_size)

    @torch.no_grad()
    def forward(self, inputs: torch.Tensor, rows: Rows) -> torch.Tensor:
        """inputs: token ids (rows, width) on the first stage, else the previous stage's activations.
        Returns activations (rows, width, dim), or on the last stage the logits (rows, vocab) of each
        row's last valid token."""
        m = self.model
        x = inputs
        if self.first:
            pos = rows.positions.clamp(max=m.block_size - 1)  # padding may run past the context
            x = m.drop(m.tok(inputs) + m.pos(pos))
        x = cached_blocks_forward(self.blocks, x, self.cache, rows)
        if not self.last:
            return x
        tail = x[torch.arange(x.shape[0]), rows.lengths - 1]
        return m.head(m.norm(tail))
