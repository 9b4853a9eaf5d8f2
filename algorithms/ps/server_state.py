"""The server's state on disk, written through the one atomic writer (algorithms.checkpointing.atomic:
temporary file, fsync, rename, directory fsync): a server killed at any moment leaves either the
previous checkpoint or the new one, never a torn file, and a saved one survives a power loss."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from algorithms.checkpointing import atomic, load_file

FORMAT = 1


def path_for(directory: str | os.PathLike, rank: int) -> Path:
    return Path(directory) / f"ps-server-{rank}.pt"


def save(path: Path, state: dict[str, Any]) -> None:
    atomic.save(path, {"format": FORMAT, **state})


def load(path: Path) -> dict[str, Any] | None:
    """The saved state, None when there is none yet; a CheckpointError naming the file when it holds more
    than tensors and plain containers (refused unrun) or cannot be read."""
    if not path.exists():
        return None
    state = load_file(path)  # weights only: a crafted file is refused, never run
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a parameter-server checkpoint of format {FORMAT}")
    return state
