"""A character-level GPT the size of nanoGPT's shakespeare_char model (6 layers, 6 heads, 384 wide,
context 256), with weight tying and the FLOP count needed for MFU. Cut into pipeline stages as
[embedding, block 0, ..., block n-1, final norm, head]; the head's weight is then untied from the token
embedding (tie_weights=False: they sit on different stages, apps.train sets it for parallel.pp > 1)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from apps.models.parts import Part
from apps.models.transformer import Block


def embed(m: Any, idx: torch.Tensor) -> torch.Tensor:
    """Token plus position embedding (dropout after), as the GPT and its first pipeline stage compute it."""
    t = idx.shape[1]
    if t > m.block_size:
        raise ValueError(f"sequence length {t} exceeds block_size {m.block_size}")
    return m.drop(m.tok(idx) + m.pos(torch.arange(t, device=idx.device)))


class GPT(nn.Module):
    def __init__(
        self,
        vocab_size: int = 65,
        block_size: int = 256,
        n_layer: int = 6,
        n_head: int = 6,
        n_embd: int = 384,
        dropout: float = 0.2,
        bias: bool = False,
        tie_weights: bool = True,
    ):
        super().__init__()
        self.block_size, self.n_layer, self.n_head, self.n_embd = block_size, n_layer, n_head, n_embd
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *[Block(n_embd, n_head, 4.0, dropout, causal=True, bias=bias) for _ in range(n_layer)]
        )
        self.norm = nn.LayerNorm(n_embd, bias=bias)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        if tie_weights:
            self.head.weight = self.tok.weight  # weight tying (Press & Wolf 2017), as nanoGPT
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))  # GPT-2's scaled residual init

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(embed(self, idx))))

    def pipeline_layers(self) -> nn.Sequential:
        parts = Part(embed, tok=self.tok, pos=self.pos, drop=self.drop, block_size=self.block_size)
        return nn.Sequential(parts, *self.blocks, self.norm, self.head)

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6N + 12 L T d (PaLM appendix B, as nanoGPT's estimate_mfu)."""
        n = sum(p.numel() for p in self.parameters()) - self.pos.weight.numel()
        return 6 * n + 12 * self.n_layer * self.block_size * self.n_embd
