"""The messages between pipeline stages, over pycomm point-to-point (shapes travel with the data).

Stage i -> i + 1 (tag FORWARD): a `meta` int64 tensor of (rows + 1, ROW + stages), then, for a
micro-batch, the activations (rows, width, dim) (stage 0 -> 1) . Row 0 of meta is the header:
kind, rows, width, then from column ROW each stage's compute time in ns (each stage fills its own).
Rows 1.. describe one sequence each (columns below); the last stage writes the sampled token into
column TOKEN and sends meta back to rank 0 (tag TOKENS). HEARTBEAT (keeps idle receives from
reaching PYCOMM_TIMEOUT) and STOP (shutdown, acknowledged by the last stage) carry no rows."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from apps.serve.kv_cache import Rows

FORWARD, TOKENS = 11, 12                       # tags
BATCH, HEARTBEAT, STOP = 0, 1, 2               # kinds
SLOT, START, LENGTH, TOP_K, SEED, NEW, TEMPERATURE, TOKEN = range(8)   # per-row columns
ROW = 8


@dataclass
class Meta:
    """A decoded meta tensor (kept as the tensor too: stages pass it on with their timing added)."""
    tensor: torch.Tensor

    @classmethod
    def control(cls, kind: int, stages: int) -> "Meta":
        t = torch.zeros(1, ROW + stages, dtype=torch.int64)
        t[0, 0] = kind
        return cls(t)

    @classmethod
    def batch(cls, stages: int, width: int, slots: list[int], starts: list[int], lengths: list[int],
              top_ks: list[int | None], seeds: list[int], new: list[bool], temperatures: list[float]) -> "Meta":
        t = torch.zeros(len(slots) + 1, ROW + stages, dtype=torch.int64)
        t[0, :3] = torch.tensor([BATCH, len(slots), width])
        body = t[1:]
        body[:, SLOT] = torch.tensor(slots)
        body[:, START] = torch.tensor(starts)
        body[:, LENGTH] = torch.tensor(lengths)
        body[:, TOP_K] = torch.tensor([k or 0 for k in top_ks])
        body[:, SEED] = torch.tensor(seeds, dtype=torch.int64)
        body[:, NEW] = torch.tensor(new, dtype=torch.int64)
        body[:, TEMPERATURE] = torch.tensor(temperatures, dtype=torch.float64).view(torch.int64)  # the bits
        return cls(t)

    @property
    def kind(self) -> int:
        return int(self.tensor[0, 0])

    @property
    def width(self) -> int:
        return int(self.tensor[0, 2])

    def column(self, c: int) -> torch.Tensor:
        return self.tensor[1:, c]

    def rows(self) -> Rows:
        return Rows(self.column(SLOT), self.column(START), self.column(LENGTH), self.width)

    def temperatures(self) -> list[float]:
        return self.column(TEMPERATURE).clone().view(torch.float64).tolist()

    def top_ks(self) -> list[int | None]:
        return [k or None for k in self.column(TOP_K).tolist()]

    def set_stage_ns(self, stage: int, ns: int) -> None:
        self.tensor[0, ROW + stage] = ns

    def stage_ns(self) -> list[int]:
        return self.tensor[0, ROW:].tolist()


class _ShapedP2P:
    """TEMPORARY until branch p2p lands comm.send_tensor / recv_tensor / irecv_tensor: a shape header
    (ndim, dims, dtype code) sent before the data with fixed-size send/recv."""
    DTYPES = [torch.int64, torch.float32, torch.float64, torch.bfloat16, torch.float16]

    def __init__(self, comm):
        self.comm = comm

    def send_tensor(self, t: torch.Tensor, dst: int, tag: int = 0) -> None:
        t = t.contiguous()
        head = torch.zeros(6, dtype=torch.int64)
        head[0], head[1] = t.dim(), self.DTYPES.index(t.dtype)
        head[2:2 + t.dim()] = torch.tensor(t.shape)
        self.comm.send(head, dst, tag)
        self.comm.send(t, dst, tag)

    def irecv_tensor(self, src: int, tag: int = 0) -> "_Pending":
        head = torch.zeros(6, dtype=torch.int64)
        return _Pending(self, head, self.comm.irecv(head, src, tag), src, tag)

    def recv_tensor(self, src: int, tag: int = 0) -> torch.Tensor:
        return self.irecv_tensor(src, tag).wait()


class _Pending:
    def __init__(self, p2p: _ShapedP2P, head: torch.Tensor, work, src: int, tag: int):
        self.p2p, self.head, self.work, self.src, self.tag = p2p, head, work, src, tag

    def is_completed(self) -> bool:
        return self.work.is_completed()

    def wait(self) -> torch.Tensor:
        self.work.wait()
        ndim, code = int(self.head[0]), int(self.head[1])
        t = torch.empty(self.head[2:2 + ndim].tolist(), dtype=_ShapedP2P.DTYPES[code])
        self.p2p.comm.recv(t, self.src, self.tag)
        return t


class Link:
    """This rank's ends of the pipeline: receive from the previous stage, send to the next (the
    last stage sends tokens back to rank 0)."""

    def __init__(self, comm, stage: int, stages: int):
        self.p2p = _ShapedP2P(comm)
        self.stage, self.stages = stage, stages

    def send_forward(self, meta: Meta, activations: torch.Tensor | None) -> None:
        nxt = self.stage + 1
        self.p2p.send_tensor(meta.tensor, nxt, FORWARD)
        if activations is not None:
            self.p2p.send_tensor(activations, nxt, FORWARD)

    def recv_forward(self) -> tuple[Meta, torch.Tensor | None]:
        prev = self.stage - 1
        meta = Meta(self.p2p.recv_tensor(prev, FORWARD))
        x = self.p2p.recv_tensor(prev, FORWARD) if meta.kind == BATCH else None
        return meta, x

    def send_back(self, meta: Meta) -> None:
        self.p2p.send_tensor(meta.tensor, 0, TOKENS)

    def irecv_back(self):
        """On rank 0: the next reply of the last stage; .is_completed(), .wait() -> the meta tensor."""
        return self.p2p.irecv_tensor(self.stages - 1, TOKENS)
