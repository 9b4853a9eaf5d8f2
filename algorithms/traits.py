"""What an algorithm class declares about itself, so that apps (and any other driver) dispatch on these
class attributes, never on algorithm names. A new algorithm sets them and needs no edit elsewhere.

`training`: how it is trained.
  WRAPPER   hooks into the user's loop: loss.backward(); opt.step()  (mbsgd, plsgd, qsr, easgd, lsgd, ...)
  OWN_LOOP  trains in a loop of its own: opt.train(model, loss_fn, dataset, ...)  (lapsgd, lppsgd)
  PIPELINE  a model wrapper whose train_step runs the schedule (pipeline parallelism)
  SERVER    ranks take server or worker roles (parameter servers)
`state_layout`: how the model and optimizer state are held across ranks after a step, which decides
the checkpoint layout.
  IDENTICAL every rank holds the same parameters and optimizer state: saved once (rank 0)
  PER_RANK  ranks differ (local methods): saved by every rank
  SHARDED   each rank holds a shard: saved by every rank, with the metadata to reshard
`independent_processes` (bool): the ranks are independent processes talking over a fault-tolerant
transport (algorithms/ps: ZeroMQ), so one's death ends no other; a launcher must then not start them as
one MPI job (whose model aborts every rank when one dies)."""

from __future__ import annotations

from typing import Any

WRAPPER, OWN_LOOP, PIPELINE, SERVER = "wrapper", "own_loop", "pipeline", "server"
TRAINING_MODES = (WRAPPER, OWN_LOOP, PIPELINE, SERVER)
IDENTICAL, PER_RANK, SHARDED = "identical", "per_rank", "sharded"
STATE_LAYOUTS = (IDENTICAL, PER_RANK, SHARDED)


def check(cls: type) -> None:
    """Refuse a class whose declarations are not among the known values (at registration)."""
    training: Any = getattr(cls, "training", None)
    layout: Any = getattr(cls, "state_layout", None)
    if training not in TRAINING_MODES:
        raise ValueError(f"{cls.__qualname__}.training must be one of {', '.join(TRAINING_MODES)}, got {training!r}")
    if layout not in STATE_LAYOUTS:
        raise ValueError(f"{cls.__qualname__}.state_layout must be one of {', '.join(STATE_LAYOUTS)}, got {layout!r}")
