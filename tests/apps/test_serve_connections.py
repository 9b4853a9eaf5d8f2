"""Slow clients cannot take rank 0's file descriptors: a real server (one rank, a random GPT) with its
connection caps set low, and a few hundred loopback sockets that each send half a request head and
wait. Connections past --limit-concurrency are answered 503 and closed at once, the others closed at
--header-timeout; /health answers; the server's log holds one line per kind of refusal, not one per
socket. And the log filter itself: a flood of one message is one line per interval, and the next
line says how many were left out."""

from __future__ import annotations

import logging
import resource
import socket
import subprocess
import sys
import time

import httpx
import pytest

from apps.serve.log_limit import RateLimit
from tests.apps.serving import RANDOM_GPT, serving
from tests.launch import ROOT, worker_env

pytestmark = pytest.mark.mpi
SLOW_CLIENTS = 300
LIMIT = 32  # --limit-concurrency: far fewer than the slow clients
HEADER_TIMEOUT_S = 2
WAIT_S = 120  # generous: a loaded 2-core machine


def half_request(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # and never the rest
    return s


def ending(s: socket.socket) -> str:
    """How the server ended the connection: "refused" (its 503, or a reset: it closed a connection
    whose half head it never read) or "timed out" (closed without a word, the half head read)."""
    got = b""
    try:
        while chunk := s.recv(4096):
            got += chunk
    except ConnectionResetError:
        return "refused"
    assert not got or (got.startswith(b"HTTP/1.1 503") and b"--limit-concurrency" in got), got
    return "refused" if got else "timed out"


def test_slow_connections_are_capped_and_timed_out_and_health_still_answers() -> None:
    with serving(
        "--nproc", "1", *RANDOM_GPT, "--limit-concurrency", str(LIMIT), "--header-timeout", str(HEADER_TIMEOUT_S)
    ) as server:
        port = int(server.url.rsplit(":", 1)[1])
        slow: list[socket.socket] = []
        try:
            for _ in range(SLOW_CLIENTS):
                try:
                    slow.append(half_request(port))
                except ConnectionError:  # refused and closed before our half head went out: as good
                    pass
            deadline = time.monotonic() + WAIT_S
            while True:  # while the slow sockets stay open on our side
                try:
                    health = httpx.get(server.url + "/health", timeout=10)
                    if health.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"no /health in {WAIT_S} s\n{server.output()[-4000:]}"
                time.sleep(0.2)
            endings = [ending(s) for s in slow]  # every one ends: none waits past the header timeout
        finally:
            for s in slow:
                s.close()
        # both bounds were met: connections over the limit, and heads too slow
        assert "refused" in endings and "timed out" in endings, endings
        log = server.output()
    assert len(log) < 20_000, log[-4000:]  # one line per kind of message, not one per socket
    assert 1 <= log.count("refused a connection") <= 3, log
    assert 1 <= log.count("sent no whole request head") <= 3, log


def test_the_connection_limit_fits_the_open_files_limit() -> None:
    """In a process that may open 300 files (600 at most): the default limit is lowered to fit the hard
    limit and the soft one raised to it; a limit that cannot fit is refused, saying what would."""
    check = (
        "import resource\nfrom apps.serve.connection_limits import ensure_descriptors\n"
        "print(ensure_descriptors(None), resource.getrlimit(resource.RLIMIT_NOFILE))\n"
        "try:\n    ensure_descriptors(1000)\nexcept ValueError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", check],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (300, 600)),
    )
    assert out.returncode == 0, out.stderr
    fitted, refused = out.stdout.splitlines()
    assert fitted == "344 (600, 600)", out.stdout  # 600 - 256 for everything but connections
    assert "--limit-concurrency 1000 needs about 1256 open files" in refused and "to 344 or less" in refused, refused


def test_one_line_per_kind_of_message_per_interval() -> None:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("apps.serve.test_log_limit")
    logger.propagate = False
    handler = Keep()
    logger.addHandler(handler)
    limit = RateLimit(interval_s=0.5)
    logger.addFilter(limit)
    try:
        for i in range(1000):
            logger.warning("accept failed on socket %d", i)  # one kind: the same format string
        logger.warning("another kind")
        time.sleep(0.6)  # past the interval
        logger.warning("accept failed on socket %d", 1000)
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(limit)
    assert seen == [
        "accept failed on socket 0",
        "another kind",
        "accept failed on socket 1000 (and 999 more like it in the last 0.5 s, not logged)",
    ], seen
