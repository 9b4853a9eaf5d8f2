"""Encodings laid out in one byte buffer, one fixed-size slot per rank, for all-to-all / all-gather.

Slot r holds the encoding of chunk r: the codec's data (int8 levels or sign bits), padded to 4 bytes,
then its fp32 scales. Encoded views into a slot let the codec encode and decode in place, so nothing
is copied between the kernels and the transport."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm._buffers import POOL
from pycomm.codecs import Codec, Encoded, resolve_codec


def check_codec(codec: object, what: str) -> Codec:
    """A codec instance, or the one a codec name ("int8", "1bit", ...) stands for (pycomm.codecs.CODEC_NAMES)."""
    return resolve_codec(codec, what)


class WireLayout:
    """`slots` slots, each the encoding of `chunk` elements (a whole number of codec blocks)."""

    def __init__(self, codec: Codec, chunk: int, slots: int, device: torch.device) -> None:
        self.codec, self.chunk, self.slots, self.device = codec, chunk, slots, device
        self.data_numel = codec.data_numel(chunk)
        self._data_raw = self.data_numel * torch.empty((), dtype=codec.data_dtype).element_size()
        self.data_bytes = -(-self._data_raw // 4) * 4  # scales start 4-byte aligned
        self.scale_count = -(-chunk // codec.block)
        self.slot_bytes = self.data_bytes + 4 * self.scale_count

    def buffer(self) -> torch.Tensor:
        return POOL.take(self.slots * self.slot_bytes, torch.uint8, self.device)

    def release(self, buf: torch.Tensor) -> None:
        POOL.give(buf)

    def slot(self, buf: torch.Tensor, r: int) -> torch.Tensor:
        return buf[r * self.slot_bytes : (r + 1) * self.slot_bytes]

    def encoded(self, buf: torch.Tensor, r: int) -> Encoded:
        """The Encoded whose payload is slot r of buf (views, no copy)."""
        s = self.slot(buf, r)
        return Encoded(
            s[: self._data_raw].view(self.codec.data_dtype), s[self.data_bytes :].view(torch.float32), self.chunk
        )

    def encode_into(self, buf: torch.Tensor, r: int, x: torch.Tensor, residual: torch.Tensor | None) -> None:
        self.codec.encode(x, residual=residual, out=self.encoded(buf, r))

    def decode(self, buf: torch.Tensor, r: int, out: torch.Tensor) -> None:
        self.codec.decode(self.encoded(buf, r), out)

    def decode_accumulate(self, buf: torch.Tensor, r: int, acc: torch.Tensor) -> None:
        self.codec.decode_accumulate(self.encoded(buf, r), acc)

    def reduce_encode_into(
        self,
        buf: torch.Tensor,
        slot: int,
        own: torch.Tensor,
        own_residual: torch.Tensor | None,
        recv: torch.Tensor,
        sources: Sequence[int],
        factor: float,
        scratch: torch.Tensor,
        residual: torch.Tensor | None,
        decoded_out: torch.Tensor | None = None,
    ) -> bool:
        """The reduce step: slot `slot` of buf = encode(v, residual), v = (own (+ own_residual, then
        zeroed) + the decode of every slot of `recv` in `sources`) * factor, own filling v's start and
        the rest starting at 0. One fused pass per block on the CPU (fp32 own) where the codec has one
        (codec.fused_reduce_encode: int8, int4 and 1-bit); else
        the codec's kernels one after another in `scratch` (fp32, a chunk), with the same result.
        The fused pass also writes decoded_out (fp32, own's size; may be own) = the decode of the slot's
        first own.numel() elements, and then returns True; False when decoded_out was left alone."""
        if own.dtype == torch.float32 and not scratch.is_cuda:
            srcs = [self.encoded(recv, r).tensors() for r in sources]
            if self.codec.fused_reduce_encode(
                own,
                srcs,
                self.encoded(buf, slot),
                factor=factor,
                own_residual=own_residual,
                residual=residual,
                decoded_out=decoded_out,
            ):
                return decoded_out is not None
        acc = scratch
        acc.zero_()
        n = own.numel()
        if n:
            acc[:n].copy_(own)
            if own_residual is not None:  # nothing of my own chunk is lost, so its residual is spent
                acc[:n].add_(own_residual)
                own_residual.zero_()
        for r in sources:
            self.decode_accumulate(recv, r, acc)
        if factor != 1.0:
            acc.mul_(factor)
        self.encode_into(buf, slot, acc, residual)
        return False
