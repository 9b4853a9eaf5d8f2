"""Reading a start-up profile (the JSON lines pycomm.startup_profile writes where PYCOMM_PROFILE_STARTUP
says): the processes of the job, each with its phases in time order and the seconds each took.

    python -m pycomm.startup_report FILE    # the phases of each process, as a table"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from pycomm.startup_profile import ENV


@dataclass
class Phase:
    name: str
    t: float  # when it ended (wall clock)
    seconds: float  # since the previous mark of the same process


@dataclass
class Process:
    pid: int
    launcher: str
    rank: int
    size: int
    phases: list[Phase]

    @property
    def label(self) -> str:
        """`rank R` for a launched rank; `main` for a process on its own (a script, the --nproc launcher)."""
        return "main" if self.launcher == "single" else f"rank {self.rank}"

    def at(self, phase: str) -> Optional[float]:
        return next((p.t for p in self.phases if p.name == phase), None)


class ProfileError(ValueError):
    """A profile file that is not what `mark` writes."""


def read(path: str | Path) -> list[Process]:
    """The processes of a profile file, in order of their first mark, each with its phases in time order
    (seconds: since the previous phase of that process). Raises ProfileError naming the bad line."""
    by_pid: dict[int, Process] = {}
    marks: dict[int, list[tuple[str, float]]] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        try:
            r = json.loads(line)
            pid, phase, t = int(r["pid"]), str(r["phase"]), float(r["t"])
            by_pid.setdefault(pid, Process(pid, str(r["launcher"]), int(r["rank"]), int(r["size"]), []))
        except (ValueError, KeyError, TypeError) as e:
            raise ProfileError(
                f"{path}:{number}: not a start-up profile line ({type(e).__name__}: {e}): {line[:120]!r}"
            ) from None
        marks.setdefault(pid, []).append((phase, t))
    for pid, ms in marks.items():
        ms.sort(key=lambda m: m[1])
        previous = ms[0][1]
        for phase, t in ms:
            by_pid[pid].phases.append(Phase(phase, t, t - previous))
            previous = t
    return sorted(by_pid.values(), key=lambda p: p.phases[0].t)


def report(processes: Sequence[Process]) -> str:
    """One block per process: each phase, its seconds, and the time since the job's first mark."""
    if not processes:
        return "no start-up marks"
    origin = min(p.phases[0].t for p in processes)
    lines = []
    for p in processes:
        lines.append(f"{p.label} (pid {p.pid}, {p.launcher}):")
        lines += [f"  {ph.name:<24} {ph.seconds:8.3f} s   at {ph.t - origin:7.3f} s" for ph in p.phases]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pycomm.startup_report", description=__doc__.split("\n\n")[0])
    p.add_argument("file", help=f"the file {ENV} named")
    args = p.parse_args(argv)
    try:
        print(report(read(args.file)))
    except (OSError, ProfileError) as e:
        print(f"python -m pycomm.startup_report: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
