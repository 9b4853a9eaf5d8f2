"""Checkpoints of apps.train in the layout of maxie's training script (docs/algorithms.md), written by
the one checkpoint writer (algorithms.checkpointing: atomic directory, manifest last, hard links for
identical files, never between a best checkpoint and the others) and read back weights only (tensors and
plain containers).

One checkpoint is one directory:
  model_state_dict.pt   optim_state_dict.pt   lr_state_dict.pt   iter_state_dict.pt   manifest.json
plus, where a state is not held identically by every data-parallel rank, the other ranks' files
(`<stem>.rank<d>.pt`: per-rank states of local methods; an optimizer's shards (ZeRO), which a resume
on any number of ranks reads whole) and, with several pipeline stages, one set per stage
(`<stem>.pp<i>[.rank<d>].pt`, the model's file holding the stage's part of the whole model's state dict
under the model's names, and `pipeline_state_dict` its counters); algorithms/checkpointing/placement.py
decides which. Names:
<prefix>.step<N> (periodic), <prefix>.step<N>.preempt (SIGTERM/SIGUSR1), <prefix>.best.step<N>
(lowest loss so far). keep_last prunes periodic ones; a checkpoint being written is never taken for a
complete one, and older checkpoints are only deleted after a newer one is complete."""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from algorithms import checkpointing, traits
from algorithms.checkpointing import MANIFEST, CheckpointError, Placement
from apps.data.sharding import ShardPlan
from apps.dist import Dist

MODEL, OPTIM, LR, ITER = "model_state_dict", "optim_state_dict", "lr_state_dict", "iter_state_dict"
STEMS = (MODEL, OPTIM)  # the states whose layout the algorithm decides (apps.loop_support.state_kinds)
PIPELINE = "pipeline_state_dict"  # a pipeline stage's own state (its byte counters), per rank
_NAME = re.compile(r"^(?P<prefix>.+?)\.(?P<best>best\.)?step(?P<step>\d+)(?P<preempt>\.preempt)?$")

__all__ = [
    "CheckpointError",
    "IterState",
    "Loaded",
    "MANIFEST",
    "STEMS",
    "save",
    "load",
    "restore",
    "resolve",
    "complete",
    "prune",
    "parse_name",
    "check_keep_last",
    "check_algorithm",
    "iteration_state",
    "load_model_state",
    "set_aside_incomplete",
]


@dataclass
class IterState:
    """Where the run is: the next samples to train on, the steps taken, and the best loss so far. The
    position (epoch, segment, sample_in_segment) is counted in samples, so it means the same data on any
    number of ranks."""

    epoch: int = 0
    segment: int = 0
    start_idx: int = 0  # the segment's bounds in the epoch's sample order
    end_idx: int = 0
    sample_in_segment: int = 0  # samples of the segment trained on, over all ranks
    step: int = 0  # optimizer steps taken
    best_loss: float = float("inf")
    world_size: int = 1
    step_samples: int = 0  # samples per step of the world that started the run (the config's step unit)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any], batch_size: int) -> "IterState":
        """An IterState from iter_state_dict.pt; older checkpoints counted the position in steps of the
        writing world (`step_in_segment`, with this run's per-rank `batch_size`) and named per-rank
        states here (per_rank, reshardable: now in the manifest)."""
        saved = dict(saved)
        legacy_steps = saved.pop("step_in_segment", None)
        for key in ("per_rank", "reshardable"):
            saved.pop(key, None)
        unknown = set(saved) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown field(s) {sorted(unknown)}")
        state = cls(**saved)
        if legacy_steps is not None and "sample_in_segment" not in saved:
            state.sample_in_segment = legacy_steps * batch_size * state.world_size
        if not state.step_samples:
            state.step_samples = batch_size * state.world_size
        return state

    def enter(self, plan: ShardPlan, epoch: int, segment: int) -> None:
        self.epoch, self.segment, self.sample_in_segment = epoch, segment, 0
        self.start_idx, self.end_idx = plan.bounds(segment)

    def settle(self, plan: ShardPlan) -> bool:
        """Move on to the next segment when `plan` has no whole step left in this one (after a step, or
        after a resume on a larger global batch). True when it moved."""
        if plan.steps_in_segment(self.segment, self.sample_in_segment) > 0:
            self.start_idx, self.end_idx = plan.bounds(self.segment)
            return False
        if self.segment + 1 < plan.num_segments:
            self.enter(plan, self.epoch, self.segment + 1)
        else:
            self.enter(plan, self.epoch + 1, 0)
        return True

    def advance(self, plan: ShardPlan) -> bool:
        """Count one step; True when the segment is finished (the position moved to the next one)."""
        self.step += 1
        self.sample_in_segment += plan.global_batch
        return self.settle(plan)


def save(
    directory: Path,
    name: str,
    dist: Dist,
    state: IterState,
    model: Any,
    optim: Any,
    lr: dict,
    kinds: Mapping[str, str] | None = None,
    at: Placement | None = None,
    algorithm: str = "none",
    extra: Mapping[str, tuple[str, Any]] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write one checkpoint collectively (every rank calls this at the same step). `kinds` gives the
    layout of the model and optimizer states (default: identical on every rank), `at` this rank's place
    in the parallel layout (default: a plain data-parallel world). The schedule's state is saved per
    pipeline stage (each stage's optimizer has its own parameter groups), the iteration state once.
    `extra`: more states, stem -> (layout, this rank's value); `meta`: facts for the manifest."""
    kinds = {stem: traits.IDENTICAL for stem in STEMS} | dict(kinds or {})
    states = {
        MODEL: (kinds[MODEL], model),
        OPTIM: (kinds[OPTIM], optim),
        LR: (traits.IDENTICAL, lr),
        ITER: (checkpointing.ONCE, asdict(state)),
        **dict(extra or {}),
    }
    try:
        return checkpointing.save(
            directory,
            name,
            states,
            dist,
            at,
            meta={**dict(meta or {}), "step": state.step, "algorithm": algorithm},
            shares_with=lambda other: _is_best(other) == _is_best(name),
        )
    except (OSError, RuntimeError) as e:
        if not checkpointing.atomic.out_of_space(e):
            raise
        parsed = parse_name(Path(name))
        found = complete(Path(directory), parsed[0]) if parsed else []
        last = (
            f"the last complete checkpoint is step {parse_name(found[-1])[1]} ({found[-1]})"
            if found
            else "there is no complete checkpoint yet"
        )
        raise CheckpointError(
            f"no space left on {directory} while writing checkpoint step {state.step}; {last}; "
            "free space there (or set checkpoint.directory elsewhere) and resume"
        ) from e


def _is_best(name: str) -> bool:
    """A best checkpoint keeps its own copy of every file: it is the run's result, kept when the periodic
    ones are pruned, and one damaged block must not take both it and the checkpoint a resume goes back to
    (periodic and preempt ones, the resume chain, share the copies of identical files)."""
    parsed = parse_name(Path(name))
    return parsed is not None and parsed[2] == "best"


@dataclass
class Loaded:
    """One rank's part of a checkpoint: a sharded state is the list of the stage's shards."""

    path: Path
    state: IterState
    model: Any
    optim: Any
    lr: dict
    kinds: dict[str, str]  # the layout each state was saved with
    algorithm: str | None  # None: written before checkpoints named their algorithm
    written_on: Placement  # the writer's parallel layout
    meta: dict[str, Any] = field(default_factory=dict)  # the manifest's facts (step, algorithm, ...)
    extra: dict[str, Any] = field(default_factory=dict)  # this rank's value of every other state (save's extra)


def _open(path: Path, batch_size: int) -> tuple[checkpointing.Checkpoint, IterState]:
    """The checkpoint and its iteration state; a checkpoint of the first format gets its layout from
    the IterState fields that held it then."""
    ckpt = checkpointing.read_manifest(path)
    if ckpt.layout is not None:
        raw = checkpointing.read(ckpt, ITER, Placement.of(None, 0, 1))
    else:
        checkpointing.verify(ckpt, [f"{ITER}.pt"])
        raw = checkpointing.load_file(path / f"{ITER}.pt")
        per_rank = raw.get("per_rank", []) if isinstance(raw, dict) else []
        per_rank = list(STEMS) if per_rank is True else per_rank or []
        sharded = isinstance(raw, dict) and raw.get("reshardable", False)
        ckpt.layout = Placement.saved({"dp_shard": ckpt.world_size or raw.get("world_size", 1)})
        ckpt.states = {
            stem: (traits.SHARDED if sharded else traits.PER_RANK) if stem in per_rank else traits.IDENTICAL
            for stem in STEMS
        } | {LR: traits.IDENTICAL, ITER: checkpointing.ONCE}
    try:
        return ckpt, IterState.from_saved(raw, batch_size)
    except (TypeError, ValueError, AttributeError) as e:  # fields of another version, or bad values
        raise CheckpointError(f"checkpoint file {path / (ITER + '.pt')} does not hold an IterState: {e}") from e


def check_algorithm(ckpt: checkpointing.Checkpoint, algorithm: str) -> None:
    """Refuse a checkpoint another algorithm wrote, naming it (its states are that algorithm's)."""
    written = ckpt.meta.get("algorithm")
    if written is not None and written != algorithm:
        layouts = ", ".join(f"{stem.split('_')[0]} {kind}" for stem, kind in ckpt.states.items() if stem in STEMS)
        raise CheckpointError(
            f"checkpoint {ckpt.path} was written by algorithm {written!r} ({layouts}); this run "
            f"uses {algorithm!r}: resume with algorithm.name={written}, or start a new run "
            "(another name)"
        )


def load(
    path: Path,
    at: Placement,
    algorithm: str | None = None,
    batch_size: int = 1,
    resized_ok: frozenset[str] = frozenset(),
) -> Loaded:
    """This rank's (iteration, model, optimizer, lr scheduler) states, verified, for a run placed `at`
    and training `algorithm` (None: not checked). `resized_ok`: per-rank states read from the first
    rank's file on another number of data-parallel ranks (placement.to_read)."""
    ckpt, state = _open(Path(path), batch_size)
    if algorithm is not None:
        check_algorithm(ckpt, algorithm)
    model, optim = (checkpointing.read(ckpt, stem, at, resized_ok=stem in resized_ok) for stem in STEMS)
    lr = checkpointing.read(ckpt, LR, at)
    extra = {
        stem: checkpointing.read(ckpt, stem, at, resized_ok=stem in resized_ok)
        for stem in ckpt.states
        if stem not in (*STEMS, LR, ITER)
    }
    return Loaded(
        Path(path),
        state,
        model,
        optim,
        lr,
        dict(ckpt.states),
        ckpt.meta.get("algorithm"),
        ckpt.layout,
        dict(ckpt.meta),
        extra,
    )


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


def restore(
    resume: str,
    directory: Path,
    prefix: str,
    at: Placement,
    algorithm: str | None = None,
    batch_size: int = 1,
    resized_ok: frozenset[str] = frozenset(),
) -> Loaded | None:
    """Resolve and load; on a bad checkpoint the error names the older complete ones to use instead."""
    path = resolve(resume, directory, prefix)
    set_aside_incomplete(directory, prefix, keep=path)
    if path is None:
        return None
    try:
        return load(path, at, algorithm, batch_size, resized_ok)
    except CheckpointError as e:
        older = [str(p) for p in complete(path.parent, prefix) if p != path and not _holds(p, e.damaged)]
        hint = f"; older complete checkpoints (use --resume PATH): {', '.join(older[-3:])}" if older else ""
        raise CheckpointError(f"{e}{hint}", e.damaged) from e


def _holds(ckpt: Path, damaged: Path | None) -> bool:
    """Whether checkpoint `ckpt` holds the very copy of the damaged file (a hard link: same inode)."""
    try:
        st = damaged.stat() if damaged is not None else None
    except OSError:  # a missing file: removing a link damages no other
        return False
    return st is not None and any(
        (f.stat().st_ino, f.stat().st_dev) == (st.st_ino, st.st_dev) for f in ckpt.iterdir() if f.is_file()
    )


def set_aside_incomplete(directory: Path, prefix: str, keep: Path | None = None) -> list[Path]:
    """Rename each checkpoint directory of `prefix` without its manifest (a save that never completed, or
    one whose manifest was removed) but `keep` to `<name>.incomplete-<time>`, saying so: it is never
    read, and a save of its step would refuse to replace it. Several ranks may race here: the first
    rename wins. Returns the new paths of those this process moved."""
    if not directory.is_dir():
        return []
    moved = []
    for p in sorted(directory.iterdir()):
        parsed = parse_name(p)
        if not parsed or parsed[0] != prefix or not p.is_dir() or (p / MANIFEST).is_file():
            continue
        if keep is not None and p.resolve() == keep.resolve():  # named by --resume: its load says it is incomplete
            continue
        aside = p.with_name(f"{p.name}.incomplete-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            os.rename(p, aside)
        except FileNotFoundError:  # another rank moved it first
            continue
        except OSError as e:  # the name taken (a second within the same second) or not movable
            print(f"{p} has no {MANIFEST} (an incomplete save) and could not be moved aside: {e}", flush=True)
            continue
        print(
            f"{p} has no {MANIFEST}: an incomplete save (the job stopped while writing it, or its manifest was "
            f"removed); moved it aside to {aside.name}",
            flush=True,
        )
        moved.append(aside)
    return moved


def iteration_state(path: Path) -> IterState:
    """The iteration state of checkpoint `path`, verified against the manifest (its `extra` holds what the
    run stored beside its position: the vocabulary, the elapsed time)."""
    return _open(Path(path), 1)[1]


def load_model_state(path: Path) -> dict:
    """The whole model's state of checkpoint `path`, verified against the manifest: what a program that
    only runs the model (apps.serve) needs. The first data-parallel rank's; with pipeline stages, every
    stage's part joined by parameter name."""
    ckpt, _ = _open(Path(path), 1)
    stages = ckpt.layout.shape["pp"] if ckpt.states.get(MODEL) != checkpointing.ONCE else 1
    state: dict = {}
    for stage in range(stages):
        at = Placement(
            {"pp": stages, "dp_replicate": 1, "dp_shard": 1}, {"pp": stage, "dp_replicate": 0, "dp_shard": 0}
        )
        state.update(checkpointing.read(ckpt, MODEL, at, resized_ok=True))
    return state
