"""A character-level GPT the size of nanoGPT's shakespeare_char model (6 layers, 6 heads, 384 wide,
context 256), with weight tying and the FLOP count needed for MFU."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from apps.models.transformer import Block


class GPT(nn.Module):
    def __init__(self, vocab_size: int = 65, block_size: int = 256, n_layer: int = 6, n_head: int = 6,
                 n_embd: int = 384, dropout: float = 0.2, bias: bool = False):
        super().__init__()
        self.block_size, self.n_layer, self.n_head, self.n_embd = block_size, n_layer, n_head, n_embd
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head, 4.0, dropout, causal=True, bias=bias)
                                      for _ in range(n_layer)])
        self.norm = nn.LayerNorm(n_embd, bias=bias)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
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
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.block_size}")
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        return self.head(self.norm(self.blocks(x)))

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6N + 12 L T d (PaLM appendix B, as nanoGPT's estimate_mfu)."""
        n = sum(p.numel() for p in self.parameters()) - self.pos.weight.numel()
        return 6 * n + 12 * self.n_layer * self.block_size * self.n_embd
