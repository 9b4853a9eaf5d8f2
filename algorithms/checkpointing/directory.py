"""One checkpoint is one directory, written collectively and committed atomically; every writer of
checkpoints (apps.train, ZeRO's save_sharded_state_dict) goes through `save`, every reader through
`read_manifest` and `read` (every file through loading.load_file: weights only).

Writing: every rank writes its files (placement.written_by) into a hidden temporary directory, each
fsync'd; after a barrier, rank 0 writes manifest.json (the layout, each state's layout, the caller's
metadata, and the size and SHA-256 of every file) last, fsyncs the directory, renames it into place
and fsyncs the parent. A directory without its manifest, or whose files do not match it, is never
read; the same name saved again replaces the old directory only once the new one is complete.

Disk: before the manifest is written, a file byte-identical to one of a complete checkpoint beside it
that the caller lets it share with (or to an earlier file of the same one) becomes a hard link to it:
one copy on disk, so checkpoints that must survive damage to each other's files share none. Checkpoint
files are never modified in place, and removing a checkpoint directory only drops its links, so
removing one never takes data from another."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from algorithms.checkpointing import atomic
from algorithms.checkpointing.loading import load_file
from algorithms.checkpointing.placement import KINDS, CheckpointError, Placement, to_read, written_by
from algorithms.traits import SHARDED

MANIFEST = "manifest.json"
FORMAT = 2  # 1 (no "format" key): no layout or state kinds in the manifest; the caller supplies them


def save(
    directory: Path,
    name: str,
    states: Mapping[str, tuple[str, Any]],
    comm: Any,
    at: Placement | None = None,
    meta: Mapping[str, Any] | None = None,
    shares_with: Callable[[str], bool] | None = None,
) -> Path:
    """Write checkpoint `directory/name` collectively: every rank of `comm` (rank, size, barrier())
    calls this with the same stems; `states` maps each stem to (layout, this rank's value), the
    layout one of placement.KINDS (a value this rank does not write may be None). `at` places this
    rank (default: a plain data-parallel world over comm). `shares_with(other name)`: whether a
    complete checkpoint beside it may hold the same copy of an identical file (default: any; a hard
    link is one copy, so one damaged block damages both). Returns the checkpoint's path."""
    directory, at = Path(directory), at or Placement.of(None, comm.rank, comm.size)
    for stem, (kind, _) in states.items():
        if kind not in KINDS:
            raise ValueError(f"checkpoint state {stem!r}: layout must be one of {', '.join(KINDS)}, got {kind!r}")
    final, tmp = directory / name, directory / f".{name}.tmp"
    if final.exists() and not (final / MANIFEST).is_file() and (not final.is_dir() or any(final.iterdir())):
        raise CheckpointError(
            f"{final} exists and is not a checkpoint (no {MANIFEST}): saving would replace it; "
            "give a new or an empty directory"
        )  # on every rank: none waits for another
    if comm.rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    comm.barrier()
    for stem, (kind, value) in states.items():
        file = written_by(stem, kind, at, comm.rank)
        if file is not None:
            atomic.write_durably(tmp / file, atomic.torch_writer(value))
    comm.barrier()  # every rank's files are on disk
    if comm.rank == 0:
        files = {p.name: {"bytes": p.stat().st_size, "sha256": atomic.sha256(p)} for p in sorted(tmp.iterdir())}
        _link_duplicates(tmp, files, directory, shares_with or (lambda other: True))
        manifest = {
            "format": FORMAT,
            "world_size": comm.size,
            "layout": dict(at.shape),
            "states": {stem: kind for stem, (kind, _) in states.items()},
            "meta": dict(meta or {}),
            "files": files,
        }
        atomic.write_durably(tmp / MANIFEST, atomic.json_writer(manifest))
        atomic.fsync_dir(tmp)
        _commit(tmp, final)
    comm.barrier()
    return final


def _commit(tmp: Path, final: Path) -> None:
    old = final.with_name(f".{final.name}.old")
    if final.exists():  # the same name saved again (e.g. after a resume): replace it, removing it last
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(tmp, final)
    atomic.fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def _link_duplicates(
    tmp: Path, files: dict[str, dict[str, Any]], directory: Path, shares_with: Callable[[str], bool]
) -> None:
    """Replace each file of `tmp` that is byte-identical to a file of a complete checkpoint in
    `directory` that it `shares_with` (or to an earlier file of `tmp`) by a hard link to it. The digest
    finds candidates; a byte comparison decides, so a file damaged after its manifest was written is
    never linked."""
    known: dict[tuple[int, str], Path] = {}
    for ckpt in sorted(directory.iterdir()):
        if ckpt.name.startswith(".") or not (ckpt / MANIFEST).is_file() or not shares_with(ckpt.name):
            continue
        try:
            listed = json.loads((ckpt / MANIFEST).read_text())["files"]
        except (ValueError, KeyError):
            continue  # a damaged manifest: nothing to share with
        for file, meta in listed.items():
            known.setdefault((meta["bytes"], meta["sha256"]), ckpt / file)
    for file, meta in files.items():
        key, path = (meta["bytes"], meta["sha256"]), tmp / file
        source = known.get(key)
        if source is None or not source.is_file() or not filecmp.cmp(source, path, shallow=False):
            known[key] = path
            continue
        link = tmp / f".{file}.link"
        try:
            os.link(source, link)
        except OSError:  # a file system without hard links: keep the copy
            continue
        os.replace(link, path)


@dataclass
class Checkpoint:
    """A complete checkpoint's manifest: what `read` needs to find and check this rank's files."""

    path: Path
    files: dict[str, dict[str, Any]]
    world_size: int | None
    layout: Placement | None = None  # None: format 1 (the caller knows it)
    states: dict[str, str] = field(default_factory=dict)  # stem -> layout (placement.KINDS)
    meta: dict[str, Any] = field(default_factory=dict)

    def where(self) -> str:
        algorithm = self.meta.get("algorithm")
        return f"checkpoint {self.path}" + (f" (algorithm {algorithm!r})" if algorithm else "")


def read_manifest(path: Path) -> Checkpoint:
    """The checkpoint at `path`, once its manifest is there and readable (files are checked by read)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(
            f"checkpoint {path} is incomplete (no {MANIFEST}): it was being written when the "
            "job stopped; resume from an older checkpoint"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
        if manifest.get("format", 1) >= 2:
            return Checkpoint(
                path,
                files,
                manifest["world_size"],
                Placement.saved(manifest["layout"]),
                dict(manifest["states"]),
                dict(manifest.get("meta", {})),
            )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupt ({e})") from e
    return Checkpoint(path, files, manifest.get("world_size"))


def verify(ckpt: Checkpoint, names: list[str]) -> None:
    """Each named file is listed and matches its size and SHA-256; else an error naming the damage."""
    for name in names:
        if name not in ckpt.files:
            raise CheckpointError(f"{ckpt.where()} has no {name} (written by {ckpt.world_size} ranks)")
        problem = _mismatch(ckpt.path / name, ckpt.files[name])
        if problem:
            raise CheckpointError(f"checkpoint file {ckpt.path / name} is corrupt: {problem}", ckpt.path / name)


def _mismatch(path: Path, expected: dict[str, Any]) -> str | None:
    """What is wrong with one checkpoint file against its manifest entry; None when it matches."""
    if not path.is_file():
        return f"it is missing (listed in {MANIFEST})"
    size = path.stat().st_size
    if size != expected["bytes"]:
        return f"{size} bytes where {MANIFEST} says {expected['bytes']} (truncated or overwritten)"
    if atomic.sha256(path) != expected["sha256"]:
        return f"its SHA-256 differs from the one in {MANIFEST} (its contents changed after it was written)"
    return None


def read(ckpt: Checkpoint, stem: str, at: Placement, resized_ok: bool = False) -> Any:
    """This rank's value of `stem` (verified): the object, or for a SHARDED state the list of every
    shard of this rank's stage, to be resharded by the algorithm that wrote them. Refuses what the
    layouts do not allow (placement.to_read), and a file that holds more than tensors and plain
    containers (loading.load_file)."""
    if stem not in ckpt.states or ckpt.layout is None:
        raise CheckpointError(f"{ckpt.where()} holds no state {stem!r} (it holds {', '.join(ckpt.states) or 'none'})")
    kind = ckpt.states[stem]
    names = to_read(stem, kind, ckpt.layout, at, ckpt.where(), resized_ok)
    verify(ckpt, names)
    values = [load_file(ckpt.path / name) for name in names]
    return values if kind == SHARDED else values[0]
