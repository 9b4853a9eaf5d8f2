"""Transparent huge pages for large host buffers (PYCOMM_HUGEPAGES, on by default).

Open MPI's shared-memory transport moves a large message with one kernel copy from the sender's pages
(CMA), which pins every source page first: on 4 KiB pages that is 16,384 pins for 64 MiB, on 2 MiB pages
32. Measured on 2 idle ranks of a 2-core node, pycomm on huge pages against torch's default 4 KiB ones,
timed interleaved: 64 MiB broadcast 7.0 ms against 15.3 ms, 64 MiB all-reduce 11.2 ms against 22.9 ms,
256 MiB all-reduce 47.9 ms against 76.5 ms. Nothing changes below 2 MiB. The rows are in
benchmarks/results/collectives_small.json (small_hugepages, hugepage_speedup).

Two routes, both governed by the setting:
- buffers pycomm allocates (fusion buckets, shard buffers: pycomm._buffers) are advised here, before
  their first touch, so the kernel backs them with huge pages where its policy is `madvise` (most
  distributions' default) and not `never`;
- the user's own tensors (parameters, gradients) are torch's to allocate: torch's CPU allocator aligns
  and advises allocations of >= 2 MiB itself when `THP_MEM_ALLOC_ENABLE=1` is in the environment before
  torch starts, so pycomm's launchers (`--nproc`) put it there for their ranks (`rank_env`) unless it is
  set already. Under your own mpirun: `mpirun -x THP_MEM_ALLOC_ENABLE=1 ...`.
A huge page is only a hint: the kernel falls back to small pages when it has none to give, and the
contents and addresses of a buffer are the same either way."""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
from pathlib import Path
from typing import Optional

import torch

from pycomm import settings

HUGE_PAGE = 2 << 20  # x86-64 and aarch64 (4 KiB base pages)
TORCH_ENV = "THP_MEM_ALLOC_ENABLE"  # read once by torch's CPU allocator (c10/core/impl/alloc_cpu.cpp)
POLICY_FILE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
_libc: Optional[ctypes.CDLL] = None  # this process's own libc, opened at the first advice


def enabled() -> bool:
    """PYCOMM_HUGEPAGES, read now (tests and launchers may change it between calls)."""
    return bool(settings.get("PYCOMM_HUGEPAGES"))


@functools.lru_cache(maxsize=1)
def policy() -> str:
    """The kernel's transparent-huge-page policy: "always", "madvise", "never", or "unavailable" (read
    once: every new pool buffer asks)."""
    try:
        text = POLICY_FILE.read_text()
    except OSError:
        return "unavailable"
    chosen = [w[1:-1] for w in text.split() if w.startswith("[") and w.endswith("]")]
    return chosen[0] if chosen else "unavailable"


def advise(t: torch.Tensor) -> bool:
    """Asks for huge pages under the whole 2 MiB-aligned pages inside host tensor `t`'s storage; call it
    before the memory is first written (pages already backed stay small until the kernel's background
    collapse). True when the advice was given; False for device tensors, storage smaller than a huge
    page, PYCOMM_HUGEPAGES=0, or a kernel without transparent huge pages."""
    global _libc
    if t.device.type != "cpu" or not enabled():
        return False
    storage = t.untyped_storage()
    start = storage.data_ptr()
    lo = -(-start // HUGE_PAGE) * HUGE_PAGE
    hi = (start + storage.nbytes()) // HUGE_PAGE * HUGE_PAGE
    if hi <= lo or policy() in ("never", "unavailable"):
        return False
    if _libc is None:
        # the loaded libc itself (ctypes.util.find_library would fork ldconfig inside a running rank)
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return _libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_HUGEPAGE) == 0


def rank_env(env: dict[str, str]) -> dict[str, str]:
    """What a launcher adds to its ranks' environment: THP_MEM_ALLOC_ENABLE=1 (torch's allocator then
    advises the user's tensors of >= 2 MiB) unless the user set it, or set PYCOMM_HUGEPAGES=0. Changes
    `env` in place and returns it."""
    if settings.get("PYCOMM_HUGEPAGES", env):
        env.setdefault(TORCH_ENV, "1")
    return env


def backed_bytes(t: torch.Tensor) -> int:
    """Bytes of huge pages (AnonHugePages, /proc/self/smaps) in the mappings overlapping host tensor
    `t`'s storage (advice splits a mapping, so there may be several): what the kernel actually gave, for
    tests and benchmarks. 0 where smaps is not readable."""
    storage = t.untyped_storage()
    start, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
    try:
        lines = Path(f"/proc/{os.getpid()}/smaps").read_text().splitlines()
    except OSError:
        return 0
    total, inside = 0, False
    for line in lines:
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and ":" not in head:  # a mapping's header: lo-hi perms offset ...
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo < end and start < hi
        elif inside and head == "AnonHugePages:":
            total += int(line.split()[1]) * 1024
    return total
