"""csrc/'s include graph points one way (csrc/README.md): every `#include "dir/..."` of a file under
csrc/<layer>/ names its own layer or one the table below lets it use. A new directory must be
added to the table, so the direction is decided when the directory is made, not later."""

from __future__ import annotations

import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2] / "csrc"

# layer -> the layers its files may include (besides their own). Lower layers never include higher ones.
MAY_INCLUDE: dict[str, set[str]] = {
    "common": set(),
    "kernels": {"common"},
    "diagnostics": {"common"},
    "rendezvous": {"common"},
    "queue": {"common", "diagnostics"},
    "host": {"common", "kernels", "diagnostics", "queue"},
    "transport": {"common", "kernels", "diagnostics", "queue", "host"},
    "bindings": {"common", "kernels", "diagnostics", "rendezvous", "queue", "host", "transport"},
}
SOURCES = ("*.h", "*.cc", "*.cu", "*.cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _sources(root: Path) -> list[Path]:
    return sorted(p for pattern in SOURCES for p in root.rglob(pattern))


def upward_includes(root: Path) -> list[str]:
    """'csrc/file: includes "x" (why not)' for each include of a source under `root` against the table."""
    bad = []
    for path in _sources(root):
        rel = path.relative_to(root)
        layer = rel.parts[0]
        if layer not in MAY_INCLUDE:
            bad.append(
                f"csrc/{rel}: directory csrc/{layer}/ is not in MAY_INCLUDE of {Path(__file__).name}; "
                "add it with the layers it may include"
            )
            continue
        for target in INCLUDE.findall(path.read_text(errors="replace")):
            parts = Path(target).parts
            if len(parts) < 2:  # "foo.h" relative to the file: same directory
                continue
            to = parts[0]
            if to == layer:
                # transport/<engine>/ may not include another engine's files (mpi never includes nccl).
                if layer == "transport" and len(rel.parts) > 2 and len(parts) > 2 and parts[1] != rel.parts[1]:
                    bad.append(f'csrc/{rel}: includes "{target}", another transport\'s file')
                continue
            if to not in MAY_INCLUDE.get(layer, set()):
                allowed = ", ".join(sorted(MAY_INCLUDE[layer])) or "nothing outside itself"
                bad.append(f'csrc/{rel}: includes "{target}" (csrc/{layer}/ may include {allowed})')
    return bad


def test_every_csrc_directory_has_a_layer():
    dirs = {p.relative_to(CSRC).parts[0] for p in _sources(CSRC)}
    assert dirs <= set(MAY_INCLUDE), f"csrc directories without a layer: {sorted(dirs - set(MAY_INCLUDE))}"
    assert "runtime" not in dirs  # the old catch-all stays split


def test_includes_point_down_the_layers():
    bad = upward_includes(CSRC)
    assert not bad, "includes against csrc/README.md's direction:\n" + "\n".join(bad)


def test_the_check_catches_an_upward_include(tmp_path):
    """The check itself can fail: a diagnostics file including the queue is named."""
    fake = tmp_path / "csrc"
    (fake / "diagnostics").mkdir(parents=True)
    (fake / "queue").mkdir()
    (fake / "transport" / "mpi").mkdir(parents=True)
    (fake / "diagnostics" / "stall.cc").write_text('#include "diagnostics/stall.h"\n#include "queue/op_queue.h"\n')
    (fake / "queue" / "op_queue.cc").write_text('#include "common/errors.h"\n#include "diagnostics/stall.h"\n')
    (fake / "transport" / "mpi" / "x.cc").write_text('#include "transport/nccl/nccl_comm.h"\n')
    bad = upward_includes(fake)
    assert bad == [
        'csrc/diagnostics/stall.cc: includes "queue/op_queue.h" (csrc/diagnostics/ may include common)',
        'csrc/transport/mpi/x.cc: includes "transport/nccl/nccl_comm.h", another transport\'s file',
    ], bad
