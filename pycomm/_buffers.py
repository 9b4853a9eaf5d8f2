"""A small pool of flat communication buffers, reused across calls.

Fresh multi-megabyte host allocations are returned to the OS on free (glibc mmap), so every call
would pay page faults on its buckets again; reusing them keeps fused all-reduce near the flat limit.

A GPU buffer is given back while kernels queued on the giver's current stream may still use it: give()
records an event there, and take() makes the taker's current stream wait for it, so a buffer reused from
another stream (another thread's, a side stream) is never written before its last user is done (torch's
caching allocator does the same with record_stream)."""

from __future__ import annotations

import threading
from collections import defaultdict

import torch

from pycomm import hugepages

_GRANULE = 1 << 16  # elements; buffers are sized up to this so near sizes share one
_MAX_FREE_BYTES = 512 << 20  # cap on what the pool keeps while nobody uses it


class BufferPool:
    """take(numel, dtype, device) -> a 1-D view of a cached buffer; give(view) returns it."""

    def __init__(self, max_free_bytes: int = _MAX_FREE_BYTES) -> None:
        self._free: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
        self._last_use: dict[int, torch.cuda.Event] = {}  # GPU buffer's data_ptr -> event after its last use
        self._free_bytes = 0
        self._max_free_bytes = max_free_bytes
        self._lock = threading.Lock()

    def take(self, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (torch.device(device), dtype)
        with self._lock:
            free = self._free[key]
            fits = [i for i, b in enumerate(free) if b.numel() >= numel]
            if fits:
                best = free.pop(min(fits, key=lambda i: free[i].numel()))
                self._free_bytes -= best.numel() * best.element_size()
                last_use = self._last_use.pop(best.data_ptr(), None)
                if last_use is not None:
                    torch.cuda.current_stream(best.device).wait_event(last_use)
                return best[:numel]
        size = max(_GRANULE, -(-numel // _GRANULE) * _GRANULE)
        buffer = torch.empty(size, dtype=dtype, device=device)
        hugepages.advise(buffer)  # before its first touch (PYCOMM_HUGEPAGES)
        return buffer[:numel]

    def give(self, view: torch.Tensor) -> None:
        base = view._base if view._base is not None else view
        nbytes = base.numel() * base.element_size()
        last_use = None
        if base.is_cuda:
            stream = torch.cuda.current_stream(base.device)
            last_use = torch.cuda.Event()
            last_use.record(stream)
            base.record_stream(stream)  # should the pool drop it, torch's allocator waits for this stream too
        with self._lock:
            if nbytes > self._max_free_bytes:
                return
            if last_use is not None:
                self._last_use[base.data_ptr()] = last_use
            free = self._free[(base.device, base.dtype)]
            free.append(base)
            self._free_bytes += nbytes
            while self._free_bytes > self._max_free_bytes:  # drop the largest first
                key, i = max(
                    ((k, i) for k, bs in self._free.items() for i in range(len(bs))),
                    key=lambda ki: self._free[ki[0]][ki[1]].numel() * self._free[ki[0]][ki[1]].element_size(),
                )
                victim = self._free[key].pop(i)
                self._last_use.pop(victim.data_ptr(), None)
                self._free_bytes -= victim.numel() * victim.element_size()


POOL = BufferPool()
