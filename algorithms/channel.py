"""An optimizer's communication: routes averages through plain or compressed all-reduce and counts the
bytes and seconds it spends, so that `comm_stats()` reports this optimizer alone.

Bytes are the payload this rank hands to collectives in its wire format (a compressed payload counts
its compressed size), none on a communicator of one rank (nothing leaves it); seconds are host time spent launching and waiting on them (time hidden behind
backward by an overlapped all-reduce is not counted)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

import pycomm


@dataclass
class CommStats:
    bytes: int = 0
    seconds: float = 0.0
    calls: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "seconds": self.seconds, "calls": self.calls}


def codec_wire_bytes(codec: Any, numel: int) -> int:
    """Bytes one rank puts on the wire for `numel` fp32 values through `codec`."""
    if hasattr(codec, "wire_bytes"):
        return int(codec.wire_bytes(numel))
    block = int(getattr(codec, "block", 256))
    scales = 4 * math.ceil(numel / block)
    if "onebit" in type(codec).__name__.lower():
        return math.ceil(numel / 8) + scales
    return numel + scales


def bytes_across_nodes(mesh: "pycomm.Mesh", bytes_by_dim: dict[str, int]) -> int:
    """Of `bytes_by_dim` (bytes per mesh dimension), those on dimensions whose group of this rank spans
    nodes (mesh.spans_nodes): what this rank handed to collectives that reach other nodes. In a node-aware
    layout (pycomm.Mesh.across_nodes: dp_shard within a node, one rank per node in dp_replicate), an
    all-reduce over two nodes sends each rank's payload once over the link between them (half in its
    reduce-scatter, half in its all-gather), so for two nodes this is the bytes the rank sends to the other."""
    return sum(n for dim, n in bytes_by_dim.items() if n and mesh.spans_nodes(dim))


class Pending:
    """An all-reduce in flight; `wait()` completes it (and copies a compressed result back)."""

    def __init__(self, channel: "Channel", work: Any, finish: Any = None) -> None:
        self._channel, self._work, self._finish = channel, work, finish

    def wait(self) -> None:
        if self._work is None:
            return
        t0 = time.perf_counter()
        self._work.wait()
        if self._finish is not None:
            self._finish()
        self._channel.stats.seconds += time.perf_counter() - t0
        self._work = None


@dataclass
class Channel:
    comm: Any
    codec: Any = None
    bucket_bytes: int | None = None  # None: pycomm's default for where the tensors live
    device: torch.device = torch.device("cpu")  # where small control tensors (leader scores) live
    stats: CommStats = field(default_factory=CommStats)
    # error-feedback state (pycomm.ErrorFeedback) of compressed all-reduces, one per call site (key)
    residuals: dict[str, Any] = field(default_factory=dict)

    def _sent(self, nbytes: int) -> None:
        if self.comm.size > 1:  # one rank's collectives move nothing
            self.stats.bytes += nbytes

    # -- all-reduce -------------------------------------------------------------------------
    def allreduce_async(
        self, tensors: Sequence[torch.Tensor], op: Any = None, key: str = "", compress: bool = True
    ) -> Pending:
        """Start an in-place all-reduce (AVG by default) of `tensors`; compressed through the codec
        when there is one and `compress` (error feedback keyed by `key`)."""
        tensors = [t for t in tensors if t.numel() > 0]
        op = pycomm.AVG if op is None else op
        if not tensors:
            return Pending(self, None)
        t0 = time.perf_counter()
        self.stats.calls += 1
        if self.codec is not None and compress:
            pending = self._quantized(tensors, op, key)
        else:
            self._sent(sum(t.numel() * t.element_size() for t in tensors))
            work = self.comm.allreduce_coalesced(list(tensors), op=op, bucket_bytes=self.bucket_bytes, async_op=True)
            pending = Pending(self, work)
        self.stats.seconds += time.perf_counter() - t0
        return pending

    def allreduce(self, tensors: Sequence[torch.Tensor], op: Any = None, key: str = "", compress: bool = True) -> None:
        self.allreduce_async(tensors, op, key, compress).wait()

    def average_relative(
        self, tensors: Sequence[torch.Tensor], reference: Sequence[torch.Tensor], key: str
    ) -> list[torch.Tensor]:
        """mean_j x_j (new tensors; `tensors` untouched), sent as x - reference through the codec
        (pycomm.relative): `reference` must be identical on every rank."""
        delta = pycomm.relative.to_relative(tensors, reference)
        self.allreduce(delta, key=key)
        pycomm.relative.from_relative(delta, reference)
        return delta

    def _quantized(self, tensors: Sequence[torch.Tensor], op: Any, key: str) -> Pending:
        flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
        residual = self.residuals.get(key)
        if residual is None or (residual.local is not None and residual.local.numel() != flat.numel()):
            residual = self.residuals[key] = pycomm.ErrorFeedback()
        self._sent(codec_wire_bytes(self.codec, flat.numel()))
        work = self.comm.allreduce_quantized(flat, op=op, codec=self.codec, error_feedback=residual, async_op=True)

        def unflatten() -> None:
            offset = 0
            for t in tensors:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()

        return Pending(self, work, unflatten)

    # -- other collectives ------------------------------------------------------------------
    def broadcast(self, tensors: Sequence[torch.Tensor], root: int) -> None:
        """Broadcast `tensors` (in place) from `root`, fused into flat buckets per dtype."""
        t0 = time.perf_counter()
        tensors = [t for t in tensors if t.numel()]
        with torch.no_grad():
            self.comm.broadcast_coalesced(tensors, root=root, bucket_bytes=self.bucket_bytes, async_op=True).wait()
        self.stats.calls += 1
        self._sent(sum(t.numel() * t.element_size() for t in tensors))
        self.stats.seconds += time.perf_counter() - t0

    def allgather_scalar(self, value: float) -> list[float]:
        """Every rank's `value`, in rank order."""
        t0 = time.perf_counter()
        mine = torch.tensor([value], dtype=torch.float64, device=self.device)
        out = torch.empty(self.comm.size, dtype=torch.float64, device=self.device)
        self.comm.allgather(out, mine)
        self.stats.calls += 1
        self._sent(8)
        self.stats.seconds += time.perf_counter() - t0
        return out.tolist()

    # -- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "stats": self.stats.as_dict(),
            "residuals": {
                k: {name: None if t is None else t.clone() for name, t in ef.state_dict().items()}
                for k, ef in self.residuals.items()
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats = CommStats(**state["stats"])
        self.residuals = {}
        for key, buffers in state["residuals"].items():
            ef = self.residuals[key] = pycomm.ErrorFeedback()
            ef.load_state_dict({name: None if t is None else t.clone() for name, t in buffers.items()})
