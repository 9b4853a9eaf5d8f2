"""The server's state on disk, written atomically (temporary file, fsync, rename): a server killed at any
moment leaves either the previous checkpoint or the new one, never a torn file."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

FORMAT = 1


def path_for(directory: str | os.PathLike, rank: int) -> Path:
    return Path(directory) / f"ps-server-{rank}.pt"


def save(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save({"format": FORMAT, **state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: Path) -> dict[str, Any] | None:
    """The saved state, None when there is none yet."""
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a parameter-server checkpoint of format {FORMAT}")
    return state
