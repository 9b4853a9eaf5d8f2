"""The one way pycomm reads a file of a checkpoint back (apps.train's states, ZeRO's shards, a parameter
server's state): torch.load with weights_only=True, so that a file yields tensors and plain containers
(dicts, lists, tuples, strings, numbers, None, dtypes) and never runs code. A crafted file whose pickle
asks for anything else (a `__reduce__` that calls a function) is refused before any of it runs. A
manifest's SHA-256 is no defence here: whoever can rewrite a checkpoint file can rewrite its manifest.
Every state pycomm saves is made of such values; a state that needs another type must be stored as them."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from algorithms.checkpointing.placement import CheckpointError


def load_file(path: str | os.PathLike) -> Any:
    """The object saved in checkpoint file `path`, on the CPU; a CheckpointError naming the file when it
    holds what a checkpoint may not (refused unrun) or cannot be read at all (truncated, not a torch file)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # torch's weights-only unpickler met a global or opcode it does not allow
        raise CheckpointError(
            f"{path} holds objects a checkpoint may not hold ({_refused(e)}): refusing to load "
            "it; it may have been tampered with",
            Path(path),
        ) from e
    except Exception as e:  # a file that matches its hash but does not unpickle is still a clear error
        raise CheckpointError(f"checkpoint file {path} cannot be read: {e}", Path(path)) from e


def _refused(e: pickle.UnpicklingError) -> str:
    """What the weights-only unpickler refused, in a few words (its own message suggests allowing it)."""
    text = str(e)
    if m := re.search(r"GLOBAL (\S+) was not an allowed global", text):
        return f"a reference to {m[1]}: code, not data"
    if m := re.search(r"Unsupported operand (\d+)", text):
        return f"pickle opcode {m[1]}, which no tensor or plain container needs"
    return "something other than tensors and plain containers"
