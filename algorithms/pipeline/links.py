"""Activations and their gradients between neighbouring stages, whose shapes the receiver does not know.

With the point-to-point API that carries shape and dtype in the message (comm.isend_tensor /
irecv_tensor) a link uses it; on a communicator without it, each tensor travels as a small fixed-size
header (dtype, ndim, dims) on one tag and its payload on another, so headers match headers and payloads
match payloads in order (MPI's non-overtaking rule) and several receives can be posted ahead."""
from __future__ import annotations

from typing import Any, Optional

import torch

MAX_DIMS = 8
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool)
HEADER_TAG, PAYLOAD_TAG = 1, 2


def _header(t: torch.Tensor) -> torch.Tensor:
    if t.dtype not in DTYPES or t.dim() > MAX_DIMS:
        raise TypeError(f"Pipeline: a stage output must be a tensor of at most {MAX_DIMS} dims and dtype in "
                        f"{[str(d) for d in DTYPES]}, got {t.dtype} with {t.dim()} dims")
    h = torch.zeros(MAX_DIMS + 2, dtype=torch.int64)
    h[0], h[1] = DTYPES.index(t.dtype), t.dim()
    h[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    return h


class PendingTensor:
    """A posted receive; wait() returns the tensor."""

    def __init__(self, comm: Any, src: int) -> None:
        self.comm, self.src = comm, src
        self._typed = getattr(comm, "irecv_tensor", None)
        if self._typed is not None:
            self._work = self._typed(src, tag=PAYLOAD_TAG)
        else:
            self._head = torch.empty(MAX_DIMS + 2, dtype=torch.int64)
            self._work = comm.irecv(self._head, src, tag=HEADER_TAG)
        self._payload: Optional[torch.Tensor] = None

    def poll(self) -> None:
        """Post the payload's receive as soon as its header is in (the executor polls between computes)."""
        if self._typed is None and self._payload is None and self._work.is_completed():
            self._post_payload()

    def _post_payload(self) -> None:
        self._work.wait()
        h = self._head.tolist()
        self._payload = torch.empty(h[2:2 + h[1]], dtype=DTYPES[h[0]])
        self._work = self.comm.irecv(self._payload, self.src, tag=PAYLOAD_TAG)

    def wait(self) -> torch.Tensor:
        if self._typed is not None:
            return self._work.wait().tensor
        if self._payload is None:
            self._post_payload()
        self._work.wait()
        assert self._payload is not None
        return self._payload


class Link:
    """One direction of traffic with one neighbour, on its own communicator (forward and backward links
    use different ones, so neither direction's messages wait behind or match the other's)."""

    def __init__(self, comm: Any, peer: int) -> None:
        self.comm, self.peer = comm, peer
        self._sends: list[Any] = []

    def post_recv(self) -> PendingTensor:
        return PendingTensor(self.comm, self.peer)

    def send(self, t: torch.Tensor) -> None:
        t = t.detach().contiguous()
        typed = getattr(self.comm, "isend_tensor", None)
        if typed is not None:
            self._sends.append(typed(t, self.peer, tag=PAYLOAD_TAG))
            return
        self._sends.append(self.comm.isend(_header(t), self.peer, tag=HEADER_TAG))
        self._sends.append(self.comm.isend(t, self.peer, tag=PAYLOAD_TAG))

    def flush(self) -> None:
        """Wait for this link's sends (their tensors are kept alive until then)."""
        for w in self._sends:
            w.wait()
        self._sends = []
