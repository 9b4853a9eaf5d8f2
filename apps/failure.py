"""A rank that fails ends the job at once, and says why in one line.

Left alone, a rank that raises leaves the others waiting in their next collective until
PYCOMM_TIMEOUT, and every rank's traceback interleaves with mpirun's banner. Here a failing rank
records its error (rank, exception type, message) in a directory the ranks of the job share,
prints the full traceback only when it is the first to fail (claimed with an O_EXCL file), and
ends every rank with pycomm.abort (MPI_Abort under mpirun / srun). The --nproc launcher
(apps.launch.spawn) passes that directory in PYCOMM_APPS_FAILURE_DIR and prints the records as the
job's verdict; under a launcher of the user's own each failing rank prints its summary line.
Faults to test this with: apps.fault_injection."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from apps.apps_settings import FAILURE_DIR_ENV
from pycomm import settings

_FIRST = "first"
EXIT_FAILED, EXIT_CONFIG, EXIT_CHECKPOINT, EXIT_NONFINITE, EXIT_INTERRUPTED = 1, 2, 3, 4, 130
# how long a rank that stops only because another failed waits before ending the job itself, so that
# the failing rank's abort (its exit code, its message) is the one the job ends with
PEER_GRACE_S = 3.0


class PeerFailedError(RuntimeError):
    """This rank stops because other ranks failed (e.g. they could not load their part of a checkpoint):
    their errors are the verdict, this one only says why this rank stopped too."""


def exit_code_for(exc: BaseException) -> int:
    from apps.checkpoint import CheckpointError
    from apps.config.schema import ConfigError
    from apps.nonfinite import NonFiniteError

    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, ConfigError):
        return EXIT_CONFIG
    if isinstance(exc, NonFiniteError):
        return EXIT_NONFINITE
    return EXIT_CHECKPOINT if isinstance(exc, CheckpointError) else EXIT_FAILED


def _explains_itself(exc: BaseException) -> bool:
    """Errors whose message is the whole story (the user's config or checkpoint, a diverged run): no traceback."""
    from apps.checkpoint import CheckpointError
    from apps.config.schema import ConfigError
    from apps.nonfinite import NonFiniteError

    return isinstance(exc, (CheckpointError, ConfigError, NonFiniteError, KeyboardInterrupt))


@dataclass(frozen=True)
class Failure:
    rank: int
    size: int
    kind: str  # the exception's class name
    message: str
    exit_code: int
    secondary: bool = False  # stopped because others failed (PeerFailedError): not the cause

    @classmethod
    def of(cls, exc: BaseException, rank: int, size: int) -> "Failure":
        message = " ".join(str(exc).split()) or "(no message)"  # one line, whatever the exception held
        return cls(rank, size, type(exc).__name__, message, exit_code_for(exc), isinstance(exc, PeerFailedError))

    def line(self) -> str:
        where = f"rank {self.rank} failed" if self.size > 1 else "failed"
        return f"{where}: {self.kind}: {self.message}"


def shared_dir(env: Mapping[str, str]) -> Path | None:
    """Where the ranks of this job record failures: the --nproc launcher's directory, Open MPI's
    session directory of the job (mpirun removes it at the end), else one per job under the temp
    directory; ranks on one node share it, so each node has its own first. None when no job id is
    known (then every failing rank prints its traceback)."""
    if (given := settings.get(FAILURE_DIR_ENV, env)) is not None:
        return Path(given)
    if env.get("OMPI_MCA_orte_jobfam_session_dir"):
        return Path(env["OMPI_MCA_orte_jobfam_session_dir"]) / "pycomm-apps-failures"
    job = (
        f"slurm{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
        if "SLURM_JOB_ID" in env
        else env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_ess_base_jobid") or env.get("TORCHELASTIC_RUN_ID")
    )
    if not job:
        return None
    return Path(tempfile.gettempdir()) / ("pycomm-apps-failures-" + re.sub(r"[^A-Za-z0-9_.-]", "_", job))


def record(directory: Path, failure: Failure) -> bool:
    """Write this rank's record; True when this rank is the first of the job to fail (or when the
    directory cannot be written: then nothing is shared and this rank tells all)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".rank{failure.rank}.json.tmp"
        tmp.write_text(json.dumps(asdict(failure)))
        os.replace(tmp, directory / f"rank{failure.rank}.json")  # readers never see half a record
        if failure.secondary:
            return False  # the cause is another rank's: it prints the traceback
        fd = os.open(directory / _FIRST, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    except OSError:
        return True
    with os.fdopen(fd, "w") as f:
        f.write(str(failure.rank))
    return True


def read(directory: Path) -> list[Failure]:
    """The job's records, the first failure first, then by rank."""
    records = []
    for p in directory.glob("rank*.json"):
        try:
            records.append(Failure(**json.loads(p.read_text())))
        except (OSError, ValueError, TypeError):
            continue  # a record that cannot be read says nothing; the others still do
    try:
        first = int((directory / _FIRST).read_text())
    except (OSError, ValueError):
        first = -1
    return sorted(records, key=lambda f: (f.rank != first, f.rank))


def verdict(failures: list[Failure]) -> list[str]:
    """One line per distinct error, the first failure's first: `rank 1 failed: T: msg`, and
    `ranks 0, 2 failed: ...` when several ranks failed alike. Ranks that only stopped because others
    failed are left out when a cause is known."""
    causes = [f for f in failures if not f.secondary] or failures
    groups: dict[tuple[str, str], list[int]] = {}
    for f in causes:
        groups.setdefault((f.kind, f.message), []).append(f.rank)
    lines = []
    for (kind, message), ranks in groups.items():
        shown = ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
        lines.append(f"rank{'s' if len(ranks) > 1 else ''} {shown} failed: {kind}: {message}")
    return lines


def _where_am_i() -> tuple[int, int]:
    import pycomm

    if pycomm.is_initialized():
        world = pycomm.world()
        return world.rank, world.size
    from pycomm.launch_env import detect

    env = detect()
    return env.rank, env.size


def fail(exc: BaseException, env: Mapping[str, str] | None = None) -> int:
    """Report `exc` on this rank. With other ranks, end the job (does not return); alone, return the
    exit code for main() to return."""
    env = os.environ if env is None else env
    rank, size = _where_am_i()
    failure = Failure.of(exc, rank, size)
    directory = shared_dir(env)
    first = record(directory, failure) if directory is not None else True
    if first and not _explains_itself(exc):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    line = "" if settings.get(FAILURE_DIR_ENV, env) else failure.line()  # the launcher prints the verdict itself
    if size > 1:
        import pycomm

        if failure.secondary:
            time.sleep(PEER_GRACE_S)  # the failing rank ends the job with its own error meanwhile
        pycomm.abort(line, failure.exit_code)
    if line:
        print(line, file=sys.stderr, flush=True)
    return failure.exit_code
