"""Open MPI's noise around clean exits and clean refusals (ORTE_ERROR_LOG lines, the shared memory block)
never reaches the terminal of an --nproc run; the run's mpirun.log keeps all that mpirun printed."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from apps import failure
from apps.mpirun_stderr import RULE, MpirunStderr
from tests.apps import runs
from tests.apps.test_train_multi import needs_comm
from tests.launch import ROOT, worker_env

# Open MPI 4.1's words, as mpirun printed them after two ranks refused their --resume
SHM_AGAIN = "[vm:27970] 1 more process has sent help message help-opal-shmem-mmap.txt / sys call fail\n"
AGGREGATE = '[vm:27970] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages\n'
ABORT_AGAIN = "[vm:27970] 1 more process has sent help message help-mpi-api.txt / mpi-abort\n"
UNPACK = (
    "[vm:27970] [[444,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file "
    "../../../orte/util/show_help.c at line 513\n"
)
OUT_OF_RESOURCE = (
    "[vm:27970] [[444,0],0] ORTE_ERROR_LOG: Out of resource in file ../../../orte/util/show_help.c at line 507\n"
)
SHM = (
    f"{RULE}\nA system call failed during shared memory initialization that should\nnot have.  It is likely "
    "that your MPI job will now either abort or\nexperience performance degradation.\n\n  Local host:  vm\n"
    "  System call: unlink(2) /dev/shm/vader_segment.vm.1c0f0001.1\n  Error:       No such file or directory "
    f"(errno 2)\n{RULE}\n"
)


def test_the_noise_is_neither_shown_nor_held_but_logged() -> None:
    text = f"rank line\n{UNPACK}{OUT_OF_RESOURCE}{SHM}{SHM_AGAIN}{AGGREGATE}{ABORT_AGAIN}last rank line\n"
    sink, log = io.StringIO(), io.StringIO()
    stderr = MpirunStderr(io.BytesIO(text.encode()), sink, log)
    stderr.join()
    assert sink.getvalue() == "rank line\nlast rank line\n"
    assert stderr.held == [ABORT_AGAIN] and len(stderr.noise) == 5  # held: shown after a clean exit; noise: never
    assert log.getvalue() == text


@pytest.mark.mpi
@needs_comm
def test_a_refusal_by_every_rank_shows_its_verdict_only_and_logs_what_mpirun_printed(tmp_path: Path) -> None:
    """Both ranks refuse a --resume path that does not exist; mpirun then printed ORTE_ERROR_LOG lines on
    the terminal, under the verdict."""
    argv = runs.args(tmp_path, "refused", "plsgd", 2, "--resume", str(tmp_path / "nowhere"))
    proc = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == failure.EXIT_CHECKPOINT, proc.stdout + proc.stderr
    verdict = (
        f"failed: CheckpointError: --resume {tmp_path / 'nowhere'}: no such checkpoint directory; expected a "
        "checkpoint directory holding manifest.json (e.g. runs/<name>/checkpoints/ckpt.step00000100), or auto"
    )
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0] in (f"ranks 0, 1 {verdict}", f"ranks 1, 0 {verdict}"), proc.stderr
    log = (tmp_path / "refused" / "mpirun.log").read_text()
    assert log.startswith("==== ") and "mpirun -n 2 " in log.splitlines()[0], log
    # Open MPI's banner, which the terminal is spared too; when both ranks abort at once, mpirun's help
    # aggregation sometimes fails to unpack the banner and prints ORTE_ERROR_LOG lines in its place
    assert "MPI_ABORT was invoked on rank" in log or "ORTE_ERROR_LOG" in log, log
    assert log.rstrip().endswith(f"==== mpirun exited with code {failure.EXIT_CHECKPOINT} ===="), log
