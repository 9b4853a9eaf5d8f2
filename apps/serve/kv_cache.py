"""A key/value cache for the GPT's transformer blocks and their incremental forward.

The cache holds, per block, the keys and values of every position already seen by each sequence
slot: (slots, heads, block_size, head_dim). A forward over a batch of rows (one per sequence) feeds
each row's new tokens at positions start .. start + length - 1 (rows are right-padded to the
longest); it writes their keys and values into the cache and attends over the cached prefix. The
weights are the block's own (apps/models/transformer.py), so the result equals the full causal
forward over the whole sequence (tests/apps/test_serve_kv_cache.py checks it in float64)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from apps.models.transformer import Block


class KVCache:
    def __init__(
        self,
        blocks: int,
        slots: int,
        heads: int,
        block_size: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        shape = (blocks, slots, heads, block_size, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size

    @classmethod
    def for_blocks(cls, blocks: nn.Sequential, slots: int, block_size: int) -> "KVCache":
        first = blocks[0]
        heads, dim = first.attn.heads, first.ln1.normalized_shape[0]
        p = first.attn.qkv.weight
        return cls(len(blocks), slots, heads, block_size, dim // heads, p.dtype, p.device)


class Rows:
    """Where a batch of rows goes: slot, first position and number of valid tokens of each row."""

    def __init__(self, slots: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, width: int):
        self.slots, self.starts, self.lengths = slots, starts, lengths
        steps = torch.arange(width, device=slots.device)
        self.positions = starts[:, None] + steps  # (rows, width)
        self.valid = steps[None, :] < lengths[:, None]  # padding is False
        self.row_idx, self.col_idx = self.valid.nonzero(as_tuple=True)
        self.context = int((starts + lengths).max()) if len(slots) else 0  # keys to attend over


def cached_attention(
    block: Block, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, rows: Rows
) -> torch.Tensor:
    """block.attn over x (rows, width, dim), reading and extending k_cache/v_cache (slots, heads, T, hd)."""
    attn = block.attn
    b, t, d = x.shape
    q, k, v = attn.qkv(x).view(b, t, 3, attn.heads, d // attn.heads).permute(2, 0, 3, 1, 4)  # (b, h, t, hd)
    slot_of = rows.slots[rows.row_idx]
    pos = rows.positions[rows.row_idx, rows.col_idx]
    k_cache[slot_of, :, pos] = k[rows.row_idx, :, rows.col_idx]  # padding positions are never written
    v_cache[slot_of, :, pos] = v[rows.row_idx, :, rows.col_idx]
    keys = k_cache[rows.slots, :, : rows.context]
    values = v_cache[rows.slots, :, : rows.context]
    # a query at position p sees keys 0..p: the causal mask of the full forward, shifted by the prefix
    mask = torch.arange(rows.context, device=x.device)[None, None, :] <= rows.positions[:, :, None]
    y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None])
    return attn.resid_drop(attn.proj(y.transpose(1, 2).reshape(b, t, d)))


def cached_blocks_forward(blocks: nn.Sequential, x: torch.Tensor, cache: KVCache, rows: Rows) -> torch.Tensor:
    """The blocks' forward (pre-norm residual, as Block.forward) with the cache."""
    for i, block in enumerate(blocks):
        x = x + cached_attention(block, block.ln1(x), cache.k[i], cache.v[i], rows)
        x = x + block.mlp(block.ln2(x))
    return x
