"""A cache of validated multi-tensor layouts, so that a kernel called every step on the same
tensors (the elastic pull, the averaging apply) does not re-validate each tensor in Python per call.

An entry is keyed on a fingerprint of everything the validation reads: for every tensor its data
pointer, element count, dtype, device index and contiguity, and the call's other arguments. The
cached layout is a function of that fingerprint, so a hit can never be stale: a tensor that was
reallocated, resized, retyped, moved or restrided has a different fingerprint and is validated
afresh. (The device enters as its index, get_device(): -1 is the CPU, and two device types never
hand out the same data pointer in one process, so index and pointer together name the device;
a torch.device per tensor would cost a third of the fingerprint.) Computing the fingerprint is a
few C-level attribute reads per tensor, no Python code per tensor."""

from __future__ import annotations

import threading
from operator import attrgetter
from typing import Callable, Hashable, Sequence, TypeVar

import torch

_Tensor = torch.Tensor
_dtype_of = attrgetter("dtype")

V = TypeVar("V")


def fingerprint(tensors: Sequence[torch.Tensor]) -> tuple | None:
    """(data pointers, numels, dtypes, device indices, contiguity) of `tensors`, or None when one of
    them is not a tensor (the caller then validates, which raises the clear error)."""
    try:
        return (
            tuple(map(_Tensor.data_ptr, tensors)),
            tuple(map(_Tensor.numel, tensors)),
            tuple(map(_dtype_of, tensors)),
            tuple(map(_Tensor.get_device, tensors)),
            tuple(map(_Tensor.is_contiguous, tensors)),
        )
    except (TypeError, AttributeError, RuntimeError):  # not tensors, or tensors without storage
        return None


class LayoutCache:
    """A small map fingerprint -> validated layout, evicting the oldest entry (a hit does not reorder:
    that would hash the long key a second time); safe across threads (the layer-wise averager applies
    from its own thread)."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._entries: dict[Hashable, object] = {}  # insertion-ordered: the first is the oldest
        self._lock = threading.Lock()

    def get(self, key: Hashable | None, validate: Callable[[], V]) -> V:
        """The layout cached under `key`, else validate() (which raises on bad input; failures are
        never cached). key None means uncacheable: always validate."""
        if key is None:
            return validate()
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self.hits += 1
                return value  # type: ignore[return-value]
        value = validate()
        with self._lock:
            self.misses += 1
            self._entries[key] = value
            if len(self._entries) > self.capacity:
                del self._entries[next(iter(self._entries))]
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0
