"""Checkpoints in the training stub's layout, written atomically.

One checkpoint is one directory:
  model_state_dict.pt   optim_state_dict.pt   lr_state_dict.pt   iter_state_dict.pt   manifest.json
plus <stem>.rank{r}.pt for ranks r >= 1 only for the stems whose state differs per rank
(IterState.per_rank: model and optimizer for local methods, nothing for replicated ones, the
optimizer for sharded ones (ZeRO), whose per-rank files are shards: IterState.reshardable, every
rank of a resume on any number of ranks reads them all and keeps its part). Names:
<prefix>.step<N> (periodic), <prefix>.step<N>.preempt (SIGTERM/SIGUSR1), <prefix>.best.step<N>
(lowest loss so far).

Atomicity: every rank writes into a hidden temporary directory (fsync'd); after a barrier, rank 0
writes manifest.json (sizes and SHA-256 of every file) last, then renames the directory into place.
A directory without its manifest, or whose files do not match it, is never loaded, and older
checkpoints are only deleted after a newer one is complete.

Disk: before the manifest is written, a file byte-identical to one of a complete checkpoint in the
same directory (best, periodic and preempt at one step; per-rank copies of states that happen to
agree, e.g. right after an averaging) becomes a hard link to it. Checkpoint files are never modified
in place, and removing a checkpoint directory only drops its links, so pruning one never takes data
from another."""
from __future__ import annotations

import filecmp
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import torch

from apps.dist import Dist
from apps.data.sharding import ShardPlan

MANIFEST = "manifest.json"
STEMS = ("model_state_dict", "optim_state_dict")  # the states that may differ per rank
_NAME = re.compile(r"^(?P<prefix>.+?)\.(?P<best>best\.)?step(?P<step>\d+)(?P<preempt>\.preempt)?$")


class CheckpointError(RuntimeError):
    pass


@dataclass
class IterState:
    """Where the run is: the next batch to train on, and the best loss so far."""
    epoch: int = 0
    segment: int = 0
    start_idx: int = 0          # the segment's bounds in the epoch's sample order
    end_idx: int = 0
    step_in_segment: int = 0
    step: int = 0               # optimizer steps taken
    best_loss: float = float("inf")
    world_size: int = 1
    per_rank: list[str] = field(default_factory=list)  # STEMS each rank saves its own copy of
    reshardable: bool = False   # the per-rank files are shards of one state: loaded whole, on any number of ranks
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.per_rank, bool):  # checkpoints written before per-stem choice: all or nothing
            self.per_rank = list(STEMS) if self.per_rank else []
        unknown = set(self.per_rank) - set(STEMS)
        if unknown:
            raise ValueError(f"IterState.per_rank: unknown state(s) {sorted(unknown)}; expected some of {STEMS}")

    def enter(self, plan: ShardPlan, epoch: int, segment: int) -> None:
        self.epoch, self.segment, self.step_in_segment = epoch, segment, 0
        self.start_idx, self.end_idx = plan.bounds(segment)

    def advance(self, plan: ShardPlan) -> bool:
        """Count one step; True when the segment is finished (the position moved to the next one)."""
        self.step += 1
        self.step_in_segment += 1
        if self.step_in_segment < plan.steps_in_segment(self.segment):
            return False
        if self.segment + 1 < plan.num_segments:
            self.enter(plan, self.epoch, self.segment + 1)
        else:
            self.enter(plan, self.epoch + 1, 0)
        return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, obj: Any) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def rank_file(stem: str, rank: int, per_rank: Iterable[str]) -> str:
    """The file holding `stem` for `rank`: its own copy when the state differs per rank, else rank 0's."""
    return f"{stem}.rank{rank}.pt" if stem in per_rank and rank > 0 else f"{stem}.pt"


def _manifest_files(tmp: Path) -> dict[str, dict[str, Any]]:
    return {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(tmp.iterdir())}


def _link_duplicates(tmp: Path, files: dict[str, dict[str, Any]], directory: Path) -> None:
    """Replace each file of `tmp` that is byte-identical to a file of a complete checkpoint in
    `directory` (or to an earlier file of `tmp`) by a hard link to it. The digest finds candidates;
    a byte comparison decides, so a file damaged after its manifest was written is never linked."""
    known: dict[tuple[int, str], Path] = {}
    for ckpt in sorted(directory.iterdir()):
        if ckpt.name.startswith(".") or not (ckpt / MANIFEST).is_file():
            continue
        try:
            listed = json.loads((ckpt / MANIFEST).read_text())["files"]
        except (ValueError, KeyError):
            continue  # a damaged manifest: nothing to share with
        for name, meta in listed.items():
            known.setdefault((meta["bytes"], meta["sha256"]), ckpt / name)
    for name, meta in files.items():
        key, path = (meta["bytes"], meta["sha256"]), tmp / name
        source = known.get(key)
        if source is None or not source.is_file() or not filecmp.cmp(source, path, shallow=False):
            known[key] = path
            continue
        link = tmp / f".{name}.link"
        try:
            os.link(source, link)
        except OSError:  # a file system without hard links: keep the copy
            continue
        os.replace(link, path)


def save(directory: Path, name: str, dist: Dist, state: IterState, model: dict, optim: dict, lr: dict) -> Path:
    """Write one checkpoint collectively (every rank calls this at the same step)."""
    final, tmp = directory / name, directory / f".{name}.tmp"
    if dist.rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist.barrier()
    for stem, obj in zip(STEMS, (model, optim)):
        if dist.rank == 0 or stem in state.per_rank:  # replicated state: rank 0's copy serves every rank
            _write(tmp / rank_file(stem, dist.rank, state.per_rank), obj)
    dist.barrier()  # every rank's files are on disk
    if dist.rank == 0:
        _write(tmp / "lr_state_dict.pt", lr)
        _write(tmp / "iter_state_dict.pt", asdict(state))
        files = _manifest_files(tmp)
        _link_duplicates(tmp, files, directory)
        with open(tmp / MANIFEST, "w") as f:
            json.dump({"step": state.step, "world_size": state.world_size, "files": files}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        old = directory / f".{name}.old"
        if final.exists():  # the same step saved again (e.g. after a resume): replace it, removing it last
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(directory)
        shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def parse_name(path: Path) -> tuple[str, int, str] | None:
    """(prefix, step, kind) with kind in periodic | preempt | best; None for foreign names."""
    m = _NAME.match(path.name)
    if not m:
        return None
    kind = "best" if m["best"] else "preempt" if m["preempt"] else "periodic"
    return m["prefix"], int(m["step"]), kind


def complete(directory: Path, prefix: str) -> list[Path]:
    """Checkpoints whose manifest was written, oldest step first."""
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        parsed = parse_name(p)
        if parsed and parsed[0] == prefix and (p / MANIFEST).is_file():
            found.append((parsed[1], parsed[2] != "periodic", p))
    return [p for _, _, p in sorted(found)]


def check_keep_last(keep_last: Any) -> None:
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
        raise ValueError(f"checkpoint.keep_last must be an integer >= 0 (0 keeps all), got {keep_last!r}")


def prune(directory: Path, prefix: str, keep_last: int) -> None:
    """Keep the newest keep_last periodic checkpoints, the newest best, and preempt checkpoints that
    are newer than every periodic one; remove temporaries left by crashed saves. keep_last=0 keeps
    every periodic checkpoint. Files shared with a kept checkpoint are hard links, so they stay."""
    check_keep_last(keep_last)
    ckpts = [(p, *parse_name(p)[1:]) for p in complete(directory, prefix)]
    periodic = [p for p, _, kind in ckpts if kind == "periodic"]
    best = [p for p, _, kind in ckpts if kind == "best"]
    newest_periodic = max((s for _, s, kind in ckpts if kind == "periodic"), default=-1)
    doomed = periodic[:-keep_last] if keep_last > 0 else []
    doomed += best[:-1]
    doomed += [p for p, s, kind in ckpts if kind == "preempt" and s < newest_periodic]
    doomed += [p for p in directory.glob(f".{prefix}.*.tmp")] + [p for p in directory.glob(f".{prefix}.*.old")]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)


def verify(path: Path, needed: list[str]) -> dict:
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"checkpoint {path} is incomplete (no {MANIFEST}): it was being written when the "
                              "job stopped; resume from an older checkpoint")
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupt ({e})") from e
    for name in needed:
        if name not in files:
            raise CheckpointError(f"checkpoint {path} has no {name} (written by {manifest.get('world_size')} ranks)")
        problem = _mismatch(path / name, files[name])
        if problem:
            raise CheckpointError(f"checkpoint file {path / name} is corrupt: {problem}")
    return manifest


def _mismatch(path: Path, expected: dict[str, Any]) -> str | None:
    """What is wrong with one checkpoint file against its manifest entry; None when it matches."""
    if not path.is_file():
        return f"it is missing (listed in {MANIFEST})"
    size = path.stat().st_size
    if size != expected["bytes"]:
        return f"{size} bytes where {MANIFEST} says {expected['bytes']} (truncated or overwritten)"
    if _sha256(path) != expected["sha256"]:
        return f"its SHA-256 differs from the one in {MANIFEST} (its contents changed after it was written)"
    return None


def _torch_load(path: Path, weights_only: bool) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as e:  # a file that matches its hash but does not unpickle is still a clear error
        raise CheckpointError(f"checkpoint file {path} cannot be read: {e}") from e


def _load_stem(path: Path, files: list[str], shards: bool, weights_only: bool) -> Any:
    """One state: the object, or for a reshardable per-rank state the list of every rank's shard.
    Optimizer/algorithm state may hold plain Python objects (weights_only=False)."""
    loaded = [_torch_load(path / name, weights_only) for name in files]
    return loaded if shards else loaded[0]


def load(path: Path, rank: int, world_size: int) -> tuple[IterState, dict, dict, dict]:
    """This rank's (iter state, model, optimizer, lr scheduler) states, after verifying them."""
    path = Path(path)
    verify(path, ["iter_state_dict.pt"])
    try:
        state = IterState(**_torch_load(path / "iter_state_dict.pt", True))
    except (TypeError, ValueError) as e:  # fields of another version, or bad values
        raise CheckpointError(f"checkpoint file {path / 'iter_state_dict.pt'} does not hold an IterState: {e}") from e
    if state.per_rank and state.world_size != world_size and not state.reshardable:
        raise CheckpointError(f"checkpoint {path} holds per-rank state for {state.world_size} ranks; this run has "
                              f"{world_size}: resume with {state.world_size} ranks")
    if state.reshardable:  # every rank reads every shard (of the stems saved per rank) and keeps its part
        names = {stem: [rank_file(stem, r, state.per_rank) for r in range(state.world_size)] for stem in STEMS}
    else:
        names = {stem: [rank_file(stem, rank, state.per_rank)] for stem in STEMS}
    verify(path, [n for files in names.values() for n in files] + ["lr_state_dict.pt"])
    model, optim = (_load_stem(path, names[stem], stem in state.per_rank and state.reshardable, stem == STEMS[0])
                    for stem in STEMS)
    lr = _torch_load(path / "lr_state_dict.pt", True)
    return state, model, optim, lr


def load_model_state(path: Path) -> dict:
    """Rank 0's model state of checkpoint `path` (the whole model for replicated and sharded runs),
    verified against the manifest: what a program that only runs the model (apps.serve) needs."""
    path = Path(path)
    verify(path, [STEMS[0] + ".pt"])
    return _torch_load(path / f"{STEMS[0]}.pt", True)


EXPECTED = f"a checkpoint directory holding {MANIFEST} (e.g. runs/<name>/checkpoints/ckpt.step00000100), or auto"


def resolve(resume: str, directory: Path, prefix: str) -> Path | None:
    """--resume auto: the newest complete checkpoint (None when there is none); else the given
    checkpoint directory, or the one holding the given file (model_state_dict.pt, manifest.json, ...)."""
    if resume == "auto":
        found = complete(directory, prefix)
        return found[-1] if found else None
    path = Path(resume)
    if not path.exists():
        raise CheckpointError(f"--resume {resume}: no such checkpoint directory; expected {EXPECTED}")
    if path.is_file():
        if (path.parent / MANIFEST).is_file():
            return path.parent  # a file of a checkpoint: the checkpoint is its directory
        raise CheckpointError(f"--resume {resume} is a file, not a checkpoint; expected {EXPECTED}")
    if not (path / MANIFEST).is_file() and parse_name(path) is None:
        inside = [p for p in sorted(path.iterdir()) if parse_name(p) and (p / MANIFEST).is_file()]
        hint = f"; it holds the checkpoints {', '.join(p.name for p in inside[-3:])}: pass one" if inside else ""
        raise CheckpointError(f"--resume {resume} is a directory without {MANIFEST}{hint}; expected {EXPECTED}")
    return path


def restore(resume: str, directory: Path, prefix: str, rank: int, world_size: int
            ) -> tuple[Path, tuple[IterState, dict, dict, dict]] | None:
    """Resolve and load; on a bad checkpoint the error names the older complete ones to use instead."""
    path = resolve(resume, directory, prefix)
    if path is None:
        return None
    try:
        return path, load(path, rank, world_size)
    except CheckpointError as e:
        older = [str(p) for p in complete(path.parent, prefix) if p != path]
        hint = f"; older complete checkpoints (use --resume PATH): {', '.join(older[-3:])}" if older else ""
        raise CheckpointError(f"{e}{hint}") from e
