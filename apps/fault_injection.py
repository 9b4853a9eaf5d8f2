"""PYCOMM_APPS_FAIL_AT=RANK:STEP[:raise|exit|kill|hold], a testing aid (fault injection, as torchft's
fail_at): that rank of `python -m apps.train` raises InjectedFailure, leaves with
os._exit(EXIT_INJECTED) and no message, or is killed by SIGKILL (kill), once it has logged optimizer step
STEP (or the first chunk past it, for lapsgd / lppsgd; a parameter server: its round of pushes STEP). Any
role fails: workers, peers and servers. `hold` does not fail: the rank waits there, once, until a signal
reaches it (at most HOLD_LIMIT_S), so that a test's preemption or Ctrl-C sent when it sees that step's
line lands before the run ends, however fast the machine. A resumed process (--resume: also a server the
launcher restarted from its checkpoint) does not fail again. Unset, nothing changes and nothing runs per
step."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Callable, Mapping

from apps.apps_settings import FAIL_AT_ENV
from pycomm import settings

EXIT_INJECTED = 70
HOLD_LIMIT_S = 120.0  # a hold whose signal never comes ends: the run goes on (the test then fails on its own)


class InjectedFailure(RuntimeError):
    """Raised on the chosen rank at the chosen step."""


def injected_at(env: Mapping[str, str]) -> tuple[int, int, str] | None:
    """(rank, step, "raise" | "exit" | "kill" | "hold") from PYCOMM_APPS_FAIL_AT, None when unset (parsed by pycomm.settings)."""
    return settings.get(FAIL_AT_ENV, env)


def inject(run_class: Any, env: Mapping[str, str] | None = None) -> None:
    """Arm PYCOMM_APPS_FAIL_AT on `run_class` (apps.run.Run): its after_step, called once per step by every
    loop, fails on the chosen rank at the chosen step. Nothing changes when the variable is unset."""
    at = injected_at(os.environ if env is None else env)
    if at is None:
        return
    rank, step, how = at
    after_step: Callable[..., None] = run_class.after_step
    held = False

    def failing_after_step(run: Any) -> None:
        nonlocal held
        after_step(run)
        if run.dist.rank == rank and run.state.step >= step:  # lapsgd/lppsgd log once per chunk of steps
            if how == "hold":
                deadline = time.monotonic() + HOLD_LIMIT_S
                while not held and not run.preempt.requested and time.monotonic() < deadline:
                    time.sleep(0.02)  # SIGINT raises KeyboardInterrupt here; SIGTERM sets the flag
                held = True
                return
            if how == "kill":
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "exit":
                sys.stdout.flush()
                os._exit(EXIT_INJECTED)
            raise InjectedFailure(
                f"{FAIL_AT_ENV}={rank}:{step}:{how}: injected failure on rank {rank} at step {run.state.step}"
            )

    run_class.after_step = failing_after_step
