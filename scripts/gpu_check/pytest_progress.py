"""A pytest plugin (`-p scripts.gpu_check.pytest_progress`) that writes each test's progress to the file
named by $GPU_CHECK_PROGRESS as it happens, one JSON object a line, written through at once: what
was collected, each test's start, each phase's report (outcome, duration, the failure's text, captured
output) and its end. A crash of the test process (a segfault in the core) then still leaves every result
before it and names the test it crashed in: pytest_phase.py runs the rest in a new process, deselecting
the tests named in the file $GPU_CHECK_DONE (exact node ids, one a line: pytest's --deselect takes
prefixes, and test_x would take test_x_too along), and builds the phase's JUnit file from these lines."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "GPU_CHECK_PROGRESS"
DONE_ENV = "GPU_CHECK_DONE"
TEXT_LIMIT = 8000  # characters of a failure's text or a test's output kept (their tails)

_fd: int | None = None


def _write(record: dict[str, Any]) -> None:
    if _fd is not None:
        os.write(_fd, (json.dumps(record) + "\n").encode())  # unbuffered: nothing waits in this process


def pytest_configure(config: Any) -> None:
    global _fd
    path = os.environ.get(ENV)
    if path and _fd is None:
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def pytest_unconfigure(config: Any) -> None:
    global _fd
    if _fd is not None:
        os.close(_fd)
        _fd = None


def pytest_collection_modifyitems(session: Any, config: Any, items: list) -> None:
    path = os.environ.get(DONE_ENV)
    done = set(Path(path).read_text().splitlines()) if path and Path(path).exists() else set()
    gone = [item for item in items if item.nodeid in done]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [item for item in items if item.nodeid not in done]


def pytest_collection_finish(session: Any) -> None:
    _write({"collected": [item.nodeid for item in session.items]})


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _write(
            {
                "nodeid": report.nodeid or "collection",
                "when": "collect",
                "outcome": "failed",
                "duration": 0.0,
                "text": str(report.longrepr)[-TEXT_LIMIT:],
                "stdout": "",
            }
        )


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _write({"start": nodeid})


def pytest_runtest_logreport(report: Any) -> None:
    outcome = report.outcome
    text = ""
    if hasattr(report, "wasxfail"):  # an expected failure (skipped) or a non-strict unexpected pass (passed)
        text = f"xfail: {report.wasxfail}" if report.skipped else ""
    elif report.failed:
        text = str(report.longrepr)
    elif report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])  # (file, line, reason)
    _write(
        {
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": outcome,
            "duration": report.duration,
            "text": text[-TEXT_LIMIT:],
            "stdout": report.capstdout[-TEXT_LIMIT:],
        }
    )


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _write({"end": nodeid})
