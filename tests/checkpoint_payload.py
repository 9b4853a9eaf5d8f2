"""Crafted checkpoint files, as an attacker who can write a checkpoint directory would plant them: a file
whose pickle runs code when loaded (it creates a marker file), with the manifest beside it rewritten to
match, so that only the loader's refusal stands between the file and its code."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from algorithms.checkpointing import MANIFEST, atomic


class Payload:
    """Unpickling this calls exec: a `__reduce__` payload that creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def plant(file: Path, marker: Path) -> None:
    """Replace `file` (a new inode: links to the old one keep their bytes) by a state dict carrying a
    Payload, and rewrite the manifest beside it, if any, to the new file's size and SHA-256."""
    file.unlink(missing_ok=True)
    torch.save({"format": 1, "state": {}, "param_groups": [], "payload": Payload(marker)}, file)
    manifest = file.parent / MANIFEST
    if manifest.is_file():
        saved = json.loads(manifest.read_text())
        saved["files"][file.name] = {"bytes": file.stat().st_size, "sha256": atomic.sha256(file)}
        manifest.write_text(json.dumps(saved, indent=1))


REFUSED = "holds objects a checkpoint may not hold"  # the loader's words for a refused file
