"""Where a resumed rank of independent processes (parameter servers, ssp) continues when the checkpoint's
own position is not its own: a parameter-server worker continues after the last step its servers took
(their clocks), since the checkpoint is the server's; and whether such a rank has anything left to
train, so that `--resume auto` of a finished run ends at once instead of waiting for peers that already
left."""

from __future__ import annotations

from pathlib import Path

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
        state = checkpoint.iteration_state(path)
    except Exception:  # noqa: BLE001  (any damage is the restore's to name, with the file)
        return None
    return path, int(state.extra.get(WORKER_STEPS, {}).get(rank, state.step))


def place(state: IterState, plan: ShardPlan, step: int) -> None:
    """Move `state` to optimizer step `step` of the data order (epoch, segment, samples into it)."""
    epoch, rest = divmod(step, plan.steps_per_epoch)
    segment = 0
    while rest >= plan.steps_in_segment(segment):
        rest -= plan.steps_in_segment(segment)
        segment += 1
    state.enter(plan, epoch, segment)
    state.step, state.sample_in_segment = step, rest * plan.global_batch
