"""Small pieces of the training loop's machinery: device choice, per-step seeds, peak FLOPs for MFU,
and the checkpointer that ties model, algorithm and scheduler state to the checkpoint files."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from apps import checkpoint, failure, optim
from apps.checkpoint import CheckpointError, IterState
from apps.config import AlgorithmConfig, CheckpointConfig
from apps.dist import Dist

# Dense bf16 peak per device (one GCD for the MI250X), for MFU when train.peak_flops is not set.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "MI250X": 191.5e12, "MI300X": 1307e12,
             "V100": 125e12, "L40S": 362e12}


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
    return (seed * 1_000_003 + rank * 7_919 + step) % (2 ** 63)


def peak_flops(configured: float | None, device: torch.device) -> float | None:
    if configured:
        return configured
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def per_rank_state(algorithm: AlgorithmConfig, state_dict_type: str = "sharded") -> list[str]:
    """The checkpoint states (checkpoint.STEMS) that differ per rank under this algorithm, so each
    rank saves its own copy; the others are saved once, by rank 0. The one place that decides it, from
    the state layout the algorithm class declares (algorithms/traits.py). A sharded algorithm (ZeRO)
    saves the full model once (rank 0) and, with checkpoint.state_dict_type=sharded, the optimizer
    state as one shard per rank; with full, once (gathered)."""
    if optim.independent(algorithm):
        return []   # rank 0 alone saves (a server's model, or the first peer's replica)
    if optim.sharded(algorithm):
        return ["optim_state_dict"] if state_dict_type == "sharded" else []
    if not optim.replicated(algorithm):
        return ["model_state_dict", "optim_state_dict"]  # local models and their optimizer states
    if algorithm.options.get("codec") is not None:
        return ["optim_state_dict"]  # one model, but each rank's error-feedback residuals are its own
    return []


def writer_rank(opt: Any, dist: Dist) -> int:
    """The rank that writes the run's metrics, evaluations and the checkpoint files kept once: rank 0, or
    among independent processes the one the algorithm names (`writer_rank`: ssp's lowest rank not lost),
    so that these never depend on one rank that may die."""
    return getattr(opt, "writer_rank", 0) if dist.independent else 0


def _is_sharded(opt: Any) -> bool:
    """Whether opt holds a shard of the model's and the optimizer's state (ZeRO; traits.SHARDED)."""
    from algorithms import traits
    return getattr(type(opt), "state_layout", None) == traits.SHARDED


class Checkpointer:
    def __init__(self, cfg: CheckpointConfig, run_dir: Path, dist: Dist, model: nn.Module, opt: Any,
                 lr_sched: torch.optim.lr_scheduler.LRScheduler):
        self.cfg, self.dist, self.model, self.opt, self.lr_sched = cfg, dist, model, opt, lr_sched
        self.directory = Path(cfg.directory) if cfg.directory else run_dir / "checkpoints"
        checkpoint.check_keep_last(cfg.keep_last)  # on every rank before training, not in rank 0's first prune

    def name(self, step: int, kind: str) -> str:
        p = self.cfg.prefix
        return {"periodic": f"{p}.step{step:08d}", "preempt": f"{p}.step{step:08d}.preempt",
                "best": f"{p}.best.step{step:08d}"}[kind]

    def _states(self, state: IterState) -> tuple[dict, Any]:
        """(model state, optimizer state) this rank saves. A sharded algorithm's model file holds the
        gathered full model (ZeRO-3's live parameters are empty between steps); its optimizer state
        is this rank's shard (reshardable) or, with state_dict_type=full, the gathered whole."""
        state.reshardable = _is_sharded(self.opt) and "optim_state_dict" in state.per_rank
        if not _is_sharded(self.opt):
            return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}, self.opt.state_dict()
        if state.reshardable:
            return self.opt.full_model_state_dict(), self.opt.sharded_state_dict()
        full = self.opt.full_state_dict()
        return full["model"], full["optimizer"]

    def save(self, state: IterState, kind: str, elapsed: float) -> Path | None:
        writer = writer_rank(self.opt, self.dist)
        if self.dist.rank != writer and self.dist.independent:
            return None   # independent processes cannot write one checkpoint together: the writer's model is it
        state.extra["elapsed"] = elapsed
        model_state, optim_state = self._states(state)   # collective for a sharded algorithm
        # an independent writer writes alone, as rank 0 of a world of one would (its files are everyone's)
        path = checkpoint.save(self.directory, self.name(state.step, kind), Dist() if self.dist.independent else
                               self.dist, state, model_state, optim_state, self.lr_sched.state_dict())
        if self.dist.rank == writer:
            checkpoint.prune(self.directory, self.cfg.prefix, self.cfg.keep_last)
        return path

    def restore(self, resume: str) -> IterState | None:
        """Load model, algorithm and scheduler state; None when `auto` finds no checkpoint yet. The
        ranks agree on the outcome: when one cannot load its part (a corrupt per-rank file), every
        rank raises at once, the failing one its own error, instead of the others training on into a
        collective that never completes."""
        try:
            found, error = self._load(resume), None
        except Exception as e:  # any failure to load must stop every rank, whatever its type
            found, error = None, e
        failed = self._ranks_where(error is not None)
        if error is not None:
            raise error
        if failed:
            raise failure.PeerFailedError(f"--resume {resume}: rank(s) {', '.join(map(str, failed))} could not load their "
                                  "part of the checkpoint (their error names the file); this rank stops too")
        if found is None:
            return None
        path, state = found
        if self.dist.rank == 0:
            print(f"resumed from {path} at step {state.step} (epoch {state.epoch}, segment {state.segment})",
                  flush=True)
        return state

    def _load(self, resume: str) -> tuple[Path, IterState] | None:
        found = checkpoint.restore(resume, self.directory, self.cfg.prefix, self.dist.rank, self.dist.size)
        if found is None:
            return None
        path, (state, model_state, optim_state, lr_state) = found
        if _is_sharded(self.opt):
            self._load_sharded(state, model_state, optim_state)
        else:
            self.model.load_state_dict(model_state)
            self.opt.load_state_dict(optim_state)
        self.lr_sched.load_state_dict(lr_state)
        self.saved_world_size = state.world_size   # a sharded checkpoint may come from another world size
        state.world_size = self.dist.size
        return path, state

    def _load_sharded(self, state: IterState, model_state: dict, optim_state: Any) -> None:
        """A sharded algorithm's checkpoint, written on any number of ranks: the parameters from the
        optimizer state (each rank keeps its shard; collective), the buffers from the model file."""
        if state.reshardable:  # one shard per writing rank; hybrid runs wrote each shard once per node
            self.opt.load_sharded_state_dict(list({s["rank"]: s for s in reversed(optim_state)}.values()))
        else:
            self.opt.load_full_state_dict({"model": model_state, "optimizer": optim_state}, steps=state.step)
        params = {n for n, _ in self.model.named_parameters(remove_duplicate=False)}
        missing, unexpected = self.model.load_state_dict({k: v for k, v in model_state.items() if k not in params},
                                                         strict=False)
        if unexpected or set(missing) - params:
            raise CheckpointError(f"the checkpoint's model state does not fit this model: buffers missing "
                                  f"{sorted(set(missing) - params)[:3]}, unexpected {sorted(unexpected)[:3]}")

    def _ranks_where(self, flag: bool) -> list[int]:
        """The ranks on which `flag` is True, known to every rank."""
        mine = [1.0 if flag and r == self.dist.rank else 0.0 for r in range(self.dist.size)]
        return [r for r, v in enumerate(self.dist.allreduce_sum(mine)) if v > 0]
