"""The one way pycomm puts state on disk: a file is written under a temporary name in its directory,
flushed and fsync'd, renamed over its final name, and the directory fsync'd, so that a crash or a kill
at any moment leaves either the previous file or the new one, whole and durable, never a torn one. A
checkpoint of several files is a directory committed the same way (algorithms/checkpointing/
checkpointer.py), with its manifest written last."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any, Callable

import torch


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in `path` durable (the entry lives in the directory's own data)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """`write(f)` into `path` itself (a new file inside a directory not yet committed), then flush and
    fsync it: for files whose atomicity comes from the directory around them. On any error the partial
    file goes (a full disk gets its space back)."""
    try:
        with open(path, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def replace_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write `path` through a temporary file in the same directory (same file system, so the rename is
    atomic), fsync it, rename it over `path`, fsync the directory. On any error the temporary goes and
    `path` is as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write_durably(tmp, write)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def out_of_space(exc: BaseException) -> bool:
    """Whether a failed write failed for want of space: ENOSPC or a quota somewhere in the exception's
    chain (torch.save reports a short write as its own RuntimeError, raised while handling the OSError)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def save(path: Path, obj: Any) -> None:
    """torch.save(obj) to `path`, atomically and durably."""
    replace_atomically(Path(path), lambda f: torch.save(obj, f))


def torch_writer(obj: Any) -> Callable[[IO[bytes]], None]:
    return lambda f: torch.save(obj, f)


def json_writer(obj: Any) -> Callable[[IO[bytes]], None]:
    return lambda f: f.write(json.dumps(obj, indent=1).encode())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()
