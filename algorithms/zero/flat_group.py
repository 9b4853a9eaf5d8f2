"""One flat group of parameters split into N padded contiguous shards (ZeRO's layout, the one
pycomm's reduce_scatter_coalesced / allgather_coalesced use): the parameters' concatenation, zero-padded
to N * S elements, rank r owning flat[r S : (r + 1) S].

A group keeps this rank's fp32 master shard and one *piece* per parameter: the part of the parameter
that falls into this rank's shard (possibly empty), as an `nn.Parameter` that is a view of the master.
The shard optimizer steps the pieces, so its parameter groups hold one piece per user parameter, in the
user's order, and its per-parameter state is the shard of the user's."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Piece:
    """The part [lo, hi) of a parameter's flat elements that lies in this rank's shard, at `offset`."""

    lo: int
    hi: int
    offset: int

    @property
    def numel(self) -> int:
        return self.hi - self.lo


class FlatGroup:
    def __init__(self, params: list[torch.Tensor], size: int, rank: int, values: list[torch.Tensor]) -> None:
        """`values`: the parameters' current values (any float dtype) the master shard starts from."""
        self.params = params
        self.shapes = [torch.Size(p.shape) for p in params]  # kept: ZeRO-3 frees the parameters' storage
        self.size, self.rank = size, rank
        self.starts: list[int] = []
        total = 0
        for p in params:
            self.starts.append(total)
            total += p.numel()
        self.total = total
        self.shard_numel = -(-total // size)
        begin, end = rank * self.shard_numel, (rank + 1) * self.shard_numel
        self.pieces: list[Piece] = []
        for start, p in zip(self.starts, params):
            lo = min(max(begin - start, 0), p.numel())
            hi = max(min(end - start, p.numel()), lo)
            self.pieces.append(Piece(lo, hi, start + lo - begin if hi > lo else 0))
        device = params[0].device
        self.master = torch.zeros(self.shard_numel, dtype=torch.float32, device=device)
        for piece, v in zip(self.pieces, values):
            if piece.numel:
                self.master[piece.offset : piece.offset + piece.numel].copy_(
                    v.detach().reshape(-1)[piece.lo : piece.hi]
                )
        # views of the master: what the shard optimizer steps in place
        self.shard_params = [torch.nn.Parameter(self.piece_of(self.master, i)) for i in range(len(params))]

    def piece_of(self, flat: torch.Tensor, index: int) -> torch.Tensor:
        """Parameter `index`'s piece of a shard-shaped vector (a view)."""
        piece = self.pieces[index]
        return flat[piece.offset : piece.offset + piece.numel]

    def piece_of_full(self, full: torch.Tensor, index: int) -> torch.Tensor:
        """Parameter `index`'s piece of a full parameter-shaped tensor (a view)."""
        piece = self.pieces[index]
        return full.reshape(-1)[piece.lo : piece.hi]

    def assemble(self, pieces: list[torch.Tensor]) -> torch.Tensor:
        """A shard-shaped fp32 vector from one tensor per parameter piece (padding zero)."""
        flat = torch.zeros(self.shard_numel, dtype=torch.float32, device=self.master.device)
        for i, t in enumerate(pieces):
            if self.pieces[i].numel:
                self.piece_of(flat, i).copy_(t.reshape(-1))
        return flat
