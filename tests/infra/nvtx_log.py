"""Builds tests/infra/nvtx_log.c (our NVTX injection library) and reads the ranges it logged."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("nvtx_log.c")


def nvtx_include() -> Path | None:
    """A folder holding nvtx3/nvToolsExt.h: as cmake/PycommNvtx.cmake looks (NVTX_HOME, the CUDA toolkit,
    NVIDIA's pip wheels)."""
    roots = [os.environ.get(k) for k in ("NVTX_HOME", "CUDA_HOME")] + ["/usr/local/cuda"]
    candidates = [Path(r) / "include" for r in roots if r]
    spec = importlib.util.find_spec("nvidia")
    for base in spec.submodule_search_locations if spec else []:
        candidates += [Path(base) / d / "include" for d in ("nvtx", "cu13", "cu12")]
    return next((c for c in candidates if (c / "nvtx3" / "nvToolsExt.h").exists()), None)


def build(dest: Path) -> Path:
    """Compile the library into dest; raises RuntimeError saying what is missing."""
    include = nvtx_include()
    cc = shutil.which("cc") or shutil.which("gcc")
    if include is None or cc is None:
        raise RuntimeError(
            f"cannot build {SOURCE.name}: NVTX headers {include or 'not found'}, C compiler {cc or 'not found'}"
        )
    out = dest / "libnvtx_log.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", f"-I{include}", str(SOURCE), "-o", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@dataclass(frozen=True)
class Event:
    kind: str  # push, pop, start, end
    pid: int
    domain: str
    range_id: int
    payload: int | None
    message: str


def read(log: Path) -> list[Event]:
    events = []
    for line in log.read_text().splitlines():
        kind, pid, domain, rid, payload, *message = line.split(" ", 5)
        events.append(
            Event(
                kind,
                int(pid),
                domain,
                int(rid),
                None if payload == "-" else int(payload),
                message[0] if message else "",
            )
        )
    return events
