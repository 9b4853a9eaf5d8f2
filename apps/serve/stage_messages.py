"""The messages between pipeline stages, over pycomm point-to-point (shapes travel with the data).

Stage i -> i + 1 (tag FORWARD): a `meta` int64 tensor of (rows + 1, ROW + stages), then, for a
micro-batch, the activations (rows, width, dim). Row 0 of meta is the header:
kind, rows, width, then from column ROW each stage's compute time in ns (each stage fills its own).
Rows 1.. describe one sequence each (columns below; TEMPERATURE and TOP_P hold a float64's bits);
the last stage writes the sampled token into column TOKEN and sends meta back to rank 0 (tag TOKENS).
Every value is range-checked on rank 0 before it is written here (apps.serve.request_checks).
HEARTBEAT (keeps idle receives from reaching PYCOMM_TIMEOUT) and STOP (shutdown, acknowledged by the
last stage) carry no rows."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import pycomm
from apps.serve.kv_cache import Rows

FORWARD, TOKENS = 11, 12  # tags
BATCH, HEARTBEAT, STOP = 0, 1, 2  # kinds
SLOT, START, LENGTH, TOP_K, SEED, NEW, TEMPERATURE, TOP_P, TOKEN = range(9)  # per-row columns
ROW = 9


@dataclass
class RowSpec:
    """One sequence of a micro-batch, as rank 0 describes it."""

    slot: int
    start: int  # first position fed
    length: int  # tokens fed
    top_k: int | None
    seed: int
    new: bool  # a new sequence: the last stage seeds the slot's generator
    temperature: float
    top_p: float


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
    def batch(cls, stages: int, width: int, specs: list[RowSpec]) -> "Meta":
        t = torch.zeros(len(specs) + 1, ROW + stages, dtype=torch.int64)
        t[0, :3] = torch.tensor([BATCH, len(specs), width])
        body = t[1:]
        for c, values in (
            (SLOT, [r.slot for r in specs]),
            (START, [r.start for r in specs]),
            (LENGTH, [r.length for r in specs]),
            (TOP_K, [r.top_k or 0 for r in specs]),
            (SEED, [r.seed for r in specs]),
            (NEW, [int(r.new) for r in specs]),
        ):
            body[:, c] = torch.tensor(values, dtype=torch.int64)
        for c, floats in ((TEMPERATURE, [r.temperature for r in specs]), (TOP_P, [r.top_p for r in specs])):
            body[:, c] = torch.tensor(floats, dtype=torch.float64).view(torch.int64)  # the bits
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

    def floats(self, c: int) -> list[float]:
        return self.column(c).clone().view(torch.float64).tolist()

    def top_ks(self) -> list[int | None]:
        return [k or None for k in self.column(TOP_K).tolist()]

    def set_stage_ns(self, stage: int, ns: int) -> None:
        self.tensor[0, ROW + stage] = ns

    def stage_ns(self) -> list[int]:
        return self.tensor[0, ROW:].tolist()


class Link:
    """This rank's ends of the pipeline: receive from the previous stage, send to the next; the last
    stage replies to rank 0 on a duplicate communicator (collective: every rank builds its Link), so
    replies never queue behind activations."""

    def __init__(self, comm: pycomm.Communicator, stage: int, stages: int):
        self.forward, self.back = comm, comm.dup()
        self.stage, self.stages = stage, stages

    def send_forward(self, meta: Meta, activations: torch.Tensor | None) -> None:
        nxt = self.stage + 1
        self.forward.send_tensor(meta.tensor, nxt, FORWARD)
        if activations is not None:
            self.forward.send_tensor(activations, nxt, FORWARD)

    def recv_forward(self) -> tuple[Meta, torch.Tensor | None]:
        prev = self.stage - 1
        meta = Meta(self.forward.recv_tensor(prev, FORWARD).tensor)
        x = self.forward.recv_tensor(prev, FORWARD).tensor if meta.kind == BATCH else None
        return meta, x

    def send_back(self, meta: Meta) -> None:
        self.back.send_tensor(meta.tensor, 0, TOKENS)

    def recv_back(self) -> torch.Tensor:
        """On rank 0: the last stage's next reply (a meta tensor)."""
        return self.back.recv_tensor(self.stages - 1, TOKENS).tensor
