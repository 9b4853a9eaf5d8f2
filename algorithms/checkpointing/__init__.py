"""Checkpoints for every algorithm and for apps.train, through one writer: `atomic` puts a file on disk
so that a crash leaves the old one or the new one (temporary name, fsync, rename, directory fsync);
`directory` writes a checkpoint of several files collectively into a directory committed the same way,
its manifest last; `placement` decides, from each state's layout (algorithms/traits.py: identical, per
rank, sharded) and the parallel layout (a pycomm.Mesh or a plain data-parallel world), which rank
writes which file and which files a rank of a resumed run reads, on another number of ranks where the
layout allows it; `loading` reads every file back, weights only (tensors and plain containers, never
code). Algorithms supply state dicts only."""

from __future__ import annotations

from algorithms.checkpointing import atomic
from algorithms.checkpointing.directory import MANIFEST, Checkpoint, read, read_manifest, save, verify
from algorithms.checkpointing.loading import load_file
from algorithms.checkpointing.placement import ONCE, CheckpointError, Placement

__all__ = [
    "atomic",
    "MANIFEST",
    "Checkpoint",
    "CheckpointError",
    "ONCE",
    "Placement",
    "load_file",
    "read",
    "read_manifest",
    "save",
    "verify",
]
