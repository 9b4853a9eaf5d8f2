"""The peers of benchmarks/startup.py time their phases themselves and write them, once done, as
pycomm.startup_profile's lines (same file, same format), importing pycomm only then."""

from __future__ import annotations

from typing import Sequence


def record(marks: Sequence[tuple[str, float]]) -> None:
    from pycomm import startup_profile  # after the timed phases: the peer pays nothing of pycomm before them

    assert startup_profile.enabled(), "run with PYCOMM_PROFILE_STARTUP set"
    for phase, t in marks:
        startup_profile.mark(phase, at=t)
