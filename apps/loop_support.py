"""Small pieces of the training loop's machinery: device choice, per-step seeds, peak FLOPs for MFU,
and the checkpointer that ties model, algorithm and scheduler state to the checkpoint files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from algorithms import traits
from algorithms.checkpointing import Placement
from apps import checkpoint, failure, stage_checkpoint
from apps.checkpoint import MODEL, OPTIM, PIPELINE, IterState
from apps.config.schema import CheckpointConfig, ParallelConfig
from apps.dist import Dist
from apps.parallel import Layout

# Dense bf16 peak per device (one GCD for the MI250X), for MFU when train.peak_flops is not set.
PEAK_BF16 = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "MI250X": 191.5e12,
    "MI300X": 1307e12,
    "V100": 125e12,
    "L40S": 362e12,
}


def device_for(choice: str, local_rank: int) -> torch.device:
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but torch sees no GPU (set train.device=cpu or auto)")
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def step_seed(seed: int, rank: int, step: int) -> int:
    """The RNG seed of one step on one rank: randomness is a function of the position, so a resumed
    run draws exactly what the uninterrupted one drew (no RNG state to save)."""
    return (seed * 1_000_003 + rank * 7_919 + step) % (2**63)


def peak_flops(configured: float | None, device: torch.device) -> float | None:
    if configured:
        return configured
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def state_kinds(cls: Any, options: Mapping[str, Any], state_dict_type: str = "sharded") -> dict[str, str]:
    """How the model and the optimizer state (checkpoint.STEMS) are saved under an algorithm class (None:
    a bare torch optimizer), from the state layout it declares (algorithms/traits.py): identical (one
    copy per stage), per rank, or sharded. The one place that decides it. A sharded algorithm (ZeRO)
    saves the gathered full model once and, with checkpoint.state_dict_type=sharded, the optimizer as
    one shard per rank (resharded on resume); with full, gathered, once."""
    layout = getattr(cls, "state_layout", traits.IDENTICAL)
    if getattr(cls, "independent_processes", False):
        return {MODEL: traits.IDENTICAL, OPTIM: traits.IDENTICAL}  # rank 0 alone saves (a server's model)
    if layout == traits.SHARDED:
        return {MODEL: traits.IDENTICAL, OPTIM: traits.SHARDED if state_dict_type == "sharded" else traits.IDENTICAL}
    if layout == traits.PER_RANK:
        return {MODEL: traits.PER_RANK, OPTIM: traits.PER_RANK}  # local models and their optimizer states
    if options.get("codec") is not None:
        return {MODEL: traits.IDENTICAL, OPTIM: traits.PER_RANK}  # one model; each rank's error-feedback residuals
    return {MODEL: traits.IDENTICAL, OPTIM: traits.IDENTICAL}


def writer_rank(opt: Any, dist: Dist) -> int:
    """The rank that writes the run's metrics, evaluations and the checkpoint files kept once: rank 0, or
    among independent processes the one the algorithm names (`writer_rank`: ssp's lowest rank not lost),
    so that these never depend on one rank that may die."""
    return getattr(opt, "writer_rank", 0) if dist.independent else 0


def _is_sharded(opt: Any) -> bool:
    """Whether opt holds a shard of the model's and the optimizer's state (ZeRO; traits.SHARDED)."""
    return getattr(type(opt), "state_layout", None) == traits.SHARDED


class Checkpointer:
    """apps.train's checkpoints of one run: what each rank saves from the model, the algorithm and the
    scheduler (lr_sched is set once the run has built it), and loading them back on this run's ranks.
    `layout`: the run's apps.parallel.Layout (None: the 1-D layout over `model`). States are laid out per pipeline stage (state_kinds: one
    copy per stage, one shard per dp_shard index, or per rank), the model file of a stage holding its
    part of the whole model's state dict, so a run resumes on any dp_replicate x dp_shard its states
    allow (algorithms/checkpointing/placement.py) with the same pp and the same cut of the layers."""

    def __init__(
        self,
        cfg: CheckpointConfig,
        run_dir: Path,
        dist: Dist,
        model: nn.Module,
        opt: Any,
        lr_sched: Any = None,
        layout: Any = None,
    ):
        self.cfg, self.dist, self.model, self.opt, self.lr_sched = cfg, dist, model, opt, lr_sched
        self.layout = layout if layout is not None else Layout(ParallelConfig(), None, None, model)
        self.directory = cfg.directory_in(run_dir)
        checkpoint.check_keep_last(cfg.keep_last)  # on every rank before training, not in rank 0's first prune
        self.at = Placement.of(self.layout.mesh, dist.rank, dist.size)
        self.algorithm = getattr(opt, "name", None) or "none"  # a bare torch optimizer: "none"
        options = opt.options if isinstance(getattr(opt, "options", None), dict) else {}  # a CommOptimizer's
        self.kinds = state_kinds(type(opt), options, cfg.state_dict_type)
        identical = getattr(type(opt), "state_layout", traits.IDENTICAL) == traits.IDENTICAL
        # an identical algorithm's per-rank extras (residuals) start afresh on another number of ranks, and a
        # stage's byte counters go on from its first replica's
        self.resized_ok = frozenset(s for s, k in self.kinds.items() if identical and k == traits.PER_RANK) | {PIPELINE}

    def name(self, step: int, kind: str) -> str:
        p = self.cfg.prefix
        return {
            "periodic": f"{p}.step{step:08d}",
            "preempt": f"{p}.step{step:08d}.preempt",
            "best": f"{p}.best.step{step:08d}",
        }[kind]

    def _states(self) -> tuple[dict, Any]:
        """(model state, optimizer state) this rank saves. The model state is this rank's stage's part of
        the whole model's state dict (apps/stage_checkpoint.py), with the values a sharded algorithm
        holds gathered (ZeRO-3's live parameters are empty between steps); a sharded algorithm's
        optimizer state is this rank's shard or, with state_dict_type=full, the stage's gathered whole."""
        if _is_sharded(self.opt) and self.kinds[OPTIM] != traits.SHARDED:
            full = self.opt.full_state_dict()
            return stage_checkpoint.model_state(self.layout, self.opt, self.model, full["model"]), full["optimizer"]
        optim = self.opt.sharded_state_dict() if _is_sharded(self.opt) else self.opt.state_dict()
        return stage_checkpoint.model_state(self.layout, self.opt, self.model), optim

    def save(self, state: IterState, kind: str, elapsed: float) -> Path | None:
        writer = writer_rank(self.opt, self.dist)
        if self.dist.rank != writer and self.dist.independent:
            return None  # independent processes cannot write one checkpoint together: the writer's model is it
        state.extra["elapsed"] = elapsed
        model_state, optim_state = self._states()  # collective for a sharded algorithm
        pipe = self.layout.pipe
        extra = {PIPELINE: (traits.PER_RANK, pipe.state_dict())} if pipe is not None else {}
        # an independent writer writes alone, as rank 0 of a world of one would (its files are everyone's)
        comm, at = (Dist(), Placement.of(None, 0, 1)) if self.dist.independent else (self.dist, self.at)
        path = checkpoint.save(
            self.directory,
            self.name(state.step, kind),
            comm,
            state,
            model_state,
            optim_state,
            self.lr_sched.state_dict(),
            self.kinds,
            at,
            self.algorithm,
            extra,
            stage_checkpoint.manifest_facts(self.layout),
        )
        if self.dist.rank == writer:
            checkpoint.prune(self.directory, self.cfg.prefix, self.cfg.keep_last)
        return path

    def restore(self, resume: str, batch_size: int) -> checkpoint.Loaded | None:
        """Load model and algorithm state; the iteration and scheduler states come back for the run to
        place in this world. None when `auto` finds no checkpoint yet. The ranks agree on the outcome:
        when one cannot load its part (a corrupt per-rank file), every rank raises at once, the failing
        one its own error, instead of the others training on into a collective that never completes."""
        try:
            found, error = self._load(resume, batch_size), None
        except Exception as e:  # any failure to load must stop every rank, whatever its type
            found, error = None, e
        failed = self._ranks_where(error is not None)
        if error is not None:
            raise error
        if failed:
            raise failure.PeerFailedError(
                f"--resume {resume}: rank(s) {', '.join(map(str, failed))} could not load their "
                "part of the checkpoint (their error names the file); this rank stops too"
            )
        if found is not None and self.dist.rank == 0:
            s = found.state
            print(f"resumed from {found.path} at step {s.step} (epoch {s.epoch}, segment {s.segment})", flush=True)
        return found

    def _load(self, resume: str, batch_size: int) -> checkpoint.Loaded | None:
        loaded = checkpoint.restore(
            resume, self.directory, self.cfg.prefix, self.at, self.algorithm, batch_size, self.resized_ok
        )
        if loaded is None:
            return None
        stage_checkpoint.check_resume(self.layout, loaded.written_on, loaded.meta)
        if _is_sharded(self.opt):
            self._load_sharded(loaded)
        else:
            stage_checkpoint.load_model(self.layout, self.model, loaded.model)
            self.opt.load_state_dict(loaded.optim)
        if self.layout.pipe is not None and PIPELINE in loaded.extra:
            self.layout.pipe.load_state_dict(loaded.extra[PIPELINE])
        return loaded

    def _load_sharded(self, loaded: checkpoint.Loaded) -> None:
        """A sharded algorithm's checkpoint, written on any number of ranks: the parameters from the
        optimizer state (each rank keeps its shard; collective), the buffers from the model file."""
        if loaded.kinds[OPTIM] == traits.SHARDED:  # every shard of the stage: ZeRO reshards
            self.opt.load_sharded_state_dict(loaded.optim)
        else:
            model = stage_checkpoint.module_state(self.layout, self.model, loaded.model)  # under the stage's names
            self.opt.load_full_state_dict({"model": model, "optimizer": loaded.optim}, steps=loaded.state.step)
        stage_checkpoint.load_model(self.layout, self.model, loaded.model, parameters=False)

    def _ranks_where(self, flag: bool) -> list[int]:
        """The ranks on which `flag` is True, known to every rank."""
        mine = [1.0 if flag and r == self.dist.rank else 0.0 for r in range(self.dist.size)]
        return [r for r, v in enumerate(self.dist.allreduce_sum(mine)) if v > 0]
