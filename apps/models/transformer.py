"""The pre-norm transformer block shared by the ViT and the GPT (causal or not)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float, causal: bool, bias: bool = True):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.heads, self.causal, self.dropout = heads, causal, dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal
        )
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))


class Block(nn.Module):
    def __init__(
        self,
        dim: int,
        heads: int,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        causal: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.ln1 = nn.LayerNorm(dim, bias=bias)
        self.attn = SelfAttention(dim, heads, dropout, causal, bias)
        self.ln2 = nn.LayerNorm(dim, bias=bias)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden, bias=bias), nn.GELU(), nn.Linear(hidden, dim, bias=bias), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
