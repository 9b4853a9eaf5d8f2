"""apps' table of PYCOMM_* variables (the registry and the other layers' tables: pycomm/settings.py).
Registered when imported: a malformed value of one of these fails the import of apps, naming it."""

from __future__ import annotations

from typing import Any

from pycomm import settings
from pycomm.settings import APPS, Directory, Flag, Integer, Pattern, Setting

FAIL_AT_ENV = "PYCOMM_APPS_FAIL_AT"
TTY_ENV = "PYCOMM_APPS_TTY"
FAILURE_DIR_ENV = "PYCOMM_APPS_FAILURE_DIR"
SPAWNED = "PYCOMM_APPS_SPAWNED"
RESTARTS_ENV = "PYCOMM_PS_SERVER_RESTARTS"
SERVE_API_KEY_ENV = "PYCOMM_SERVE_API_KEY"


def _fail_at(match: Any) -> tuple[int, int, str]:
    return int(match[1]), int(match[2]), match[3] or "raise"


SETTINGS = settings.register(
    __name__,
    (
        Setting(
            FAIL_AT_ENV,
            Pattern(
                r"(\d+):(\d+)(?::(raise|exit|kill|hold))?",
                "RANK:STEP[:raise|exit|kill|hold] (e.g. 1:5:raise)",
                _fail_at,
            ),
            None,
            "testing aid: that rank raises, leaves with `os._exit(70)` and no message, is killed by "
            "SIGKILL (`kill`), or waits until a signal reaches it (`hold`: a test's preemption lands at that step), "
            "after optimizer step STEP (a parameter server: its round of pushes STEP), whatever "
            "its role; a resumed process (a server the launcher restarted too) does not fail again (fault "
            "injection as torchft's `fail_at`: `apps/fault_injection.py`, used by `tests/apps/test_failures.py` "
            "and `tests/apps/test_fault_matrix.py`)",
            "apps.fault_injection",
            scope=APPS,
            default_text="no failure",
        ),
        Setting(
            TTY_ENV,
            Flag(),
            None,
            "whether rank 0 draws its progress line in place, as on a terminal; the `--nproc` launcher passes "
            "on whether its own output is a terminal",
            "apps.metrics.Progress",
            scope=APPS,
            default_text="1 on a terminal, 0 under mpirun",
        ),
        Setting(
            FAILURE_DIR_ENV,
            Directory("the launcher makes it"),
            None,
            "set by the `--nproc` launcher for its ranks: where a failing rank records its error for the "
            "launcher's one-line summary",
            "apps.failure",
            scope=APPS,
            default_text="Open MPI's session directory, else one per job under the temp directory",
        ),
        Setting(
            SPAWNED,
            Flag(),
            False,
            "set by the `--nproc` launcher for its ranks, so that they do not launch again",
            "apps.launch, apps.requirements",
            scope=APPS,
        ),
        Setting(
            RESTARTS_ENV,
            Integer(0, 1000, "restarts", {0: "never restart"}),
            3,
            "how many times the launch of independent processes (`--nproc N`, `python -m apps.ps server`) "
            "restarts a parameter-server rank that dies while its workers go on; each restart resumes from "
            "the server's latest checkpoint (`--resume auto`)",
            "apps.supervisor",
            scope=APPS,
        ),
        Setting(
            SERVE_API_KEY_ENV,
            Pattern(r"\S+", "a key without spaces", lambda m: m.group(0)),
            None,
            "the key `python -m apps.serve` requires of every request but `/health` and the page's files "
            "(`Authorization: Bearer KEY`, as OpenAI's clients send it); here rather than `--api-key`, which "
            "every user of the machine sees in `ps` (docs/security.md)",
            "apps.serve",
            scope=APPS,
            default_text="no key: the server answers everyone who reaches it",
            secret=True,
        ),
    ),
)
