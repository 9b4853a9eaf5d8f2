"""Reference implementations written independently of the kernels, with torch and numpy only.
They follow the documented arithmetic (fp32 throughout), so results must match bit for bit."""

from __future__ import annotations

import numpy as np
import torch

MASK32 = np.uint64(0xFFFFFFFF)


def _lowbias32(h: np.ndarray, finish: bool = True) -> np.ndarray:
    """lowbias32; finish=False leaves out its last step h ^= h >> 16."""
    h = h.astype(np.uint64)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x7FEB352D)) & MASK32
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(0x846CA68B)) & MASK32
    if finish:
        h ^= h >> np.uint64(16)
    return h


def uniform(seed: int, index: np.ndarray) -> torch.Tensor:
    """u(seed, i) in [0, 1): the 24 high bits of lowbias32(lo(i) ^ key(seed, hi(i))) without its
    last xorshift (which only touches the low 16 bits)."""
    index = index.astype(np.uint64)
    hi, lo = index >> np.uint64(32), index & MASK32
    s_lo, s_hi = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    key = _lowbias32(s_lo ^ _lowbias32(s_hi ^ _lowbias32(hi ^ np.uint64(0x9E3779B9))))
    bits = _lowbias32(lo ^ key, finish=False) >> np.uint64(8)
    return torch.from_numpy(bits.astype(np.float32) * np.float32(1.0 / 16777216.0))


def blocks_of(v: torch.Tensor, block: int) -> torch.Tensor:
    """Block id of every element of a flat tensor."""
    return torch.arange(v.numel()) // block


def _absmax_levels(
    x: torch.Tensor, block: int, max_level: int, stochastic: bool, seed: int, residual: torch.Tensor | None
):
    """(levels fp32, scales fp32, new residual or None) of symmetric absmax quantization (CPU tensor x)."""
    v = x.reshape(-1).float()
    if residual is not None:
        v = v + residual.reshape(-1)
    n = v.numel()
    nb = -(-n // block)
    padded = torch.zeros(nb * block)
    padded[:n] = v.abs()
    scales = padded.view(nb, block).amax(dim=1) / float(max_level) if n else torch.zeros(0)
    s = scales[blocks_of(v, block)]
    div = torch.where(s > 0, s, torch.ones_like(s))
    if stochastic:
        y = v / div + uniform(seed, np.arange(n))
        lv = torch.floor(y.clamp(-float(max_level), float(max_level)))
    else:
        lv = torch.round((v / div).clamp(-float(max_level), float(max_level)))
    new_residual = v - lv * s if residual is not None else None
    return lv, scales, new_residual


def quantize_int8(
    x: torch.Tensor, block: int, stochastic: bool = False, seed: int = 0, residual: torch.Tensor | None = None
):
    """(q int8, scales fp32, new residual or None) for a CPU tensor x."""
    lv, scales, new_residual = _absmax_levels(x, block, 127, stochastic, seed, residual)
    return lv.to(torch.int8), scales, new_residual


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor, block: int) -> torch.Tensor:
    return q.reshape(-1).float() * scales[blocks_of(q.reshape(-1), block)]


def quantize_int4(
    x: torch.Tensor, block: int, stochastic: bool = False, seed: int = 0, residual: torch.Tensor | None = None
):
    """(packed uint8, scales fp32, new residual or None) for a CPU tensor x: levels in [-7, 7], element
    2k in the low nibble of byte k and 2k + 1 in the high one, as 4-bit two's complement."""
    lv, scales, new_residual = _absmax_levels(x, block, 7, stochastic, seed, residual)
    nibbles = lv.to(torch.int64) & 0xF
    if nibbles.numel() % 2:
        nibbles = torch.cat([nibbles, torch.zeros(1, dtype=torch.int64)])
    pairs = nibbles.view(-1, 2)
    return (pairs[:, 0] | (pairs[:, 1] << 4)).to(torch.uint8), scales, new_residual


def dequantize_int4(packed: torch.Tensor, scales: torch.Tensor, n: int, block: int) -> torch.Tensor:
    b = packed.to(torch.int64)
    nibbles = torch.stack([b & 0xF, b >> 4], dim=1).reshape(-1)[:n]
    levels = torch.where(nibbles >= 8, nibbles - 16, nibbles).float()
    return levels * scales[torch.arange(n) // block]


def sign_compress(x: torch.Tensor, block: int, residual: torch.Tensor | None = None):
    """(bits uint8, scales fp32, new residual or None) for a CPU tensor x."""
    v = x.reshape(-1).float()
    if residual is not None:
        v = v + residual.reshape(-1)
    n = v.numel()
    ids = blocks_of(v, block)
    nb = -(-n // block)
    sums = torch.zeros(nb).index_add_(0, ids, v.abs())
    counts = torch.zeros(nb).index_add_(0, ids, torch.ones(n))
    scales = sums / counts.clamp(min=1)
    positive = (v >= 0).numpy()
    bits = np.packbits(np.pad(positive, (0, (-n) % 8)), bitorder="little")
    s = scales[ids]
    new_residual = v - torch.where(torch.from_numpy(positive), s, -s) if residual is not None else None
    return torch.from_numpy(bits), scales, new_residual


def sign_decompress(bits: torch.Tensor, scales: torch.Tensor, n: int, block: int) -> torch.Tensor:
    positive = np.unpackbits(bits.numpy(), bitorder="little")[:n].astype(bool)
    s = scales[torch.arange(n) // block]
    return torch.where(torch.from_numpy(positive), s, -s)
