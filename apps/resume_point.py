"""Where a resumed rank of independent processes (parameter servers, ssp) continues when the checkpoint's
own position is not its own: a parameter-server worker continues after the last step its servers took
(their clocks), since the checkpoint is the server's; and whether such a rank has anything left to train,
so that `--resume auto` of a finished run ends at once instead of waiting for peers that already left."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from apps import checkpoint
from apps.checkpoint import IterState
from apps.data import ShardPlan

# IterState.extra key: {worker rank: steps it had taken}, written by a parameter server with its checkpoints
WORKER_STEPS = "worker_steps"


class NothingToTrain(Exception):
    """The checkpoint being resumed says this rank has trained every step of the run already."""


def steps_taken(resume: str, directory: Path, prefix: str, rank: int) -> tuple[Path, int] | None:
    """(checkpoint, steps rank `rank` had taken) of the checkpoint `--resume` names: the rank's own count
    where the checkpoint records one (a server's workers), else the checkpoint's step. None when there is
    none yet or it cannot be read here (the restore then reports it)."""
    try:
        path = checkpoint.resolve(resume, directory, prefix)
        if path is None:
            return None
        state = torch.load(path / "iter_state_dict.pt", map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001  (any damage is the restore's to name, with the file)
        return None
    return path, int(state.get("extra", {}).get(WORKER_STEPS, {}).get(rank, state["step"]))


def place(state: IterState, plan: ShardPlan, step: int) -> None:
    """Move `state` to optimizer step `step` of the data order (epoch, segment, step in segment)."""
    epoch, rest = divmod(step, plan.steps_per_epoch)
    segment = 0
    while rest >= plan.steps_in_segment(segment):
        rest -= plan.steps_in_segment(segment)
        segment += 1
    state.enter(plan, epoch, segment)
    state.step, state.step_in_segment = step, rest


def schedule_at(scheduler: Any, step: int) -> None:
    """Set the learning-rate schedule (apps' schedules: a closed form of the step) to step `step`."""
    scheduler.last_epoch = step
    rates = scheduler._get_closed_form_lr()
    for group, lr in zip(scheduler.optimizer.param_groups, rates):
        group["lr"] = lr
    scheduler._last_lr = list(rates)   # what get_last_lr() reports, as LRScheduler.step() sets it
