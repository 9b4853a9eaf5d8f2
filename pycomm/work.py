"""pycomm.Work: the handle of an asynchronous op. It keeps the op's tensors alive until completion."""

from __future__ import annotations

from typing import Any

import torch

from pycomm._build import core
from pycomm.errors import PycommError


class Work:
    """Completion of one op submitted with async_op=True (or isend / irecv).

    wait(): returns once the result may be used by the caller (for host ops: the data is in place);
    raises StallError past PYCOMM_TIMEOUT seconds, or the op's own error. is_completed() never
    blocks. synchronize() blocks the host until the op is done."""

    __slots__ = ("_handle", "_keep", "_device")

    def __init__(self, handle: Any, keep: tuple, device: int) -> None:
        self._handle = handle
        self._keep = keep  # the tensors the op reads or writes
        self._device = device  # -1 for CPU

    def _stream(self) -> int:
        return torch.cuda.current_stream(self._device).cuda_stream if self._device >= 0 else 0

    def wait(self) -> None:
        self._handle.wait(self._stream(), core().stall_timeout())
        self._keep = ()

    def synchronize(self) -> None:
        self._handle.synchronize(core().stall_timeout())
        self._keep = ()

    def is_completed(self) -> bool:
        return self._handle.is_completed()

    @property
    def source(self) -> int:
        """The sender of a completed receive (irecv from pycomm.ANY_SOURCE included)."""
        got = getattr(self._handle, "received", None)
        if got is None:
            raise PycommError(f"Work.source: {self.info['describe']} is not a completed receive (wait() first)")
        return got[0]

    @property
    def info(self) -> dict:
        """The op: name, seq (its number on its communicator), count, dtype, bytes, peer, bucket."""
        return self._handle.info

    def __repr__(self) -> str:
        state = "completed" if self.is_completed() else "pending"
        return f"<pycomm.Work {self.info['describe']} {state}>"
