"""Loading the compiled core, with an error that says how to build it when it is missing."""
from __future__ import annotations

import functools
from types import ModuleType


@functools.lru_cache(maxsize=None)
def core() -> ModuleType:
    try:
        from pycomm import _C
    except ImportError as e:
        raise ImportError(
            "pycomm's compiled core pycomm._C is not built: run `pip install .` (or `make build` for an "
            f"in-place build) in the pycomm source tree. ({e})") from e
    return _C


def build_info() -> dict:
    """What the compiled core was built with: cpu, openmp, cuda, hip, mpi, nccl, nvtx, gpu_archs."""
    return dict(_build_info_cached())


@functools.lru_cache(maxsize=None)
def _build_info_cached() -> tuple:
    return tuple(core().build_info().items())
