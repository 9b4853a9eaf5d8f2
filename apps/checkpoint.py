"""Checkpoints in the training stub's layout, written atomically.

One checkpoint is one directory:
  model_state_dict.pt   optim_state_dict.pt   lr_state_dict.pt   iter_state_dict.pt   manifest.json
plus model_state_dict.rank{r}.pt / optim_state_dict.rank{r}.pt for ranks r >= 1 when the ranks'
states differ (local methods). Names: <prefix>.step<N> (periodic), <prefix>.step<N>.preempt
(SIGTERM/SIGUSR1), <prefix>.best.step<N> (lowest loss so far).

Atomicity: every rank writes into a hidden temporary directory (fsync'd); after a barrier, rank 0
writes manifest.json (sizes and SHA-256 of every file) last, then renames the directory into place.
A directory without its manifest, or whose files do not match it, is never loaded, and older
checkpoints are only deleted after a newer one is complete."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from apps.dist import Dist
from apps.data.sharding import ShardPlan

MANIFEST = "manifest.json"
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
    per_rank: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

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


def rank_file(stem: str, rank: int, per_rank: bool) -> str:
    return f"{stem}.rank{rank}.pt" if per_rank and rank > 0 else f"{stem}.pt"


def save(directory: Path, name: str, dist: Dist, state: IterState, model: dict, optim: dict, lr: dict) -> Path:
    """Write one checkpoint collectively (every rank calls this at the same step)."""
    final, tmp = directory / name, directory / f".{name}.tmp"
    if dist.rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist.barrier()
    if dist.rank == 0 or state.per_rank:
        _write(tmp / rank_file("model_state_dict", dist.rank, state.per_rank), model)
        _write(tmp / rank_file("optim_state_dict", dist.rank, state.per_rank), optim)
    dist.barrier()  # every rank's files are on disk
    if dist.rank == 0:
        _write(tmp / "lr_state_dict.pt", lr)
        _write(tmp / "iter_state_dict.pt", asdict(state))
        files = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(tmp.iterdir())}
        with open(tmp / MANIFEST, "w") as f:
            json.dump({"step": state.step, "world_size": state.world_size, "files": files}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        if final.exists():  # the same step saved again (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(directory)
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


def prune(directory: Path, prefix: str, keep_last: int) -> None:
    """Keep the newest keep_last periodic checkpoints, the newest best, and preempt checkpoints that
    are newer than every periodic one; remove temporaries left by crashed saves."""
    ckpts = [(p, *parse_name(p)[1:]) for p in complete(directory, prefix)]
    periodic = [p for p, _, kind in ckpts if kind == "periodic"]
    best = [p for p, _, kind in ckpts if kind == "best"]
    newest_periodic = max((s for _, s, kind in ckpts if kind == "periodic"), default=-1)
    doomed = periodic[:-keep_last] if keep_last > 0 else []
    doomed += best[:-1]
    doomed += [p for p, s, kind in ckpts if kind == "preempt" and s < newest_periodic]
    doomed += [p for p in directory.glob(f".{prefix}.*.tmp")]
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
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupt ({e})") from e
    for name in needed:
        if name not in files:
            raise CheckpointError(f"checkpoint {path} has no {name} (written by {manifest.get('world_size')} ranks)")
        p = path / name
        if not p.is_file() or p.stat().st_size != files[name]["bytes"] or _sha256(p) != files[name]["sha256"]:
            raise CheckpointError(f"checkpoint {path}: {name} is corrupt or truncated (does not match {MANIFEST})")
    return manifest


def _torch_load(path: Path, weights_only: bool) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as e:  # a file that matches its hash but does not unpickle is still a clear error
        raise CheckpointError(f"checkpoint file {path} cannot be read: {e}") from e


def load(path: Path, rank: int, world_size: int) -> tuple[IterState, dict, dict, dict]:
    """This rank's (iter state, model, optimizer, lr scheduler) states, after verifying them."""
    path = Path(path)
    verify(path, ["iter_state_dict.pt"])
    state = IterState(**_torch_load(path / "iter_state_dict.pt", True))
    if state.per_rank and state.world_size != world_size:
        raise CheckpointError(f"checkpoint {path} holds per-rank state for {state.world_size} ranks; this run has "
                              f"{world_size}: resume with {state.world_size} ranks")
    names = [rank_file(stem, rank, state.per_rank) for stem in ("model_state_dict", "optim_state_dict")]
    verify(path, names + ["lr_state_dict.pt"])
    model = _torch_load(path / names[0], True)
    optim = _torch_load(path / names[1], False)  # algorithm state may hold plain Python objects
    lr = _torch_load(path / "lr_state_dict.pt", True)
    return state, model, optim, lr


def resolve(resume: str, directory: Path, prefix: str) -> Path | None:
    """--resume auto: the newest complete checkpoint (None when there is none); else the given path."""
    if resume != "auto":
        path = Path(resume)
        if not path.exists():
            raise CheckpointError(f"--resume {resume}: no such checkpoint directory")
        return path
    found = complete(directory, prefix)
    return found[-1] if found else None


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
