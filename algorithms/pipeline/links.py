"""Activations and their gradients between neighbouring stages: tensors whose shape the receiver does not
know, so they travel with pycomm's shaped point-to-point messages (comm.isend_tensor / irecv_tensor, shape
and dtype in the message header). A receive is posted ahead and waited for when its tensor is needed."""

from __future__ import annotations

from typing import Any

import torch

LOSS_TAG = 0  # the loss, back along the stages
FIRST_CHUNK_TAG = 1  # chunk c's activations and gradients: tag 1 + c (the receiving chunk), so messages
# for different chunks of one neighbour (interleaved 1F1B) never match each other's receives


class PendingTensor:
    """A posted receive; wait() returns the tensor (a new CPU tensor)."""

    def __init__(self, comm: Any, src: int, tag: int) -> None:
        self._work = comm.irecv_tensor(src, tag=tag)

    def wait(self) -> torch.Tensor:
        return self._work.wait().tensor


class Link:
    """One direction of traffic with one neighbour, on its own communicator (forward and backward links
    use different duplicates of the pipeline's communicator, so neither direction's messages wait behind
    or match the other's) and one tag. Messages on a link arrive in the order they were sent."""

    def __init__(self, comm: Any, peer: int, tag: int) -> None:
        self.comm, self.peer, self.tag = comm, peer, tag
        self._sends: list[Any] = []
        self.sent_bytes = 0  # payload sent on this link (the pipeline's bytes in the pp dimension)

    def post_recv(self) -> PendingTensor:
        return PendingTensor(self.comm, self.peer, self.tag)

    def send(self, t: torch.Tensor) -> None:
        self.sent_bytes += t.numel() * t.element_size()
        self._sends.append(self.comm.isend_tensor(t.detach(), self.peer, tag=self.tag))

    def flush(self) -> None:
        """Wait for this link's sends (their tensors are kept alive until then)."""
        for w in self._sends:
            w.wait()
        self._sends = []
