"""An emulated slow link for benchmarks: the ranks run inside a network namespace created for the run,
whose loopback is shaped by a token bucket (`tc qdisc ... tbf`; this kernel has tbf but not netem), and
Open MPI is told to use TCP over that loopback. Every rank's traffic shares the one bucket, as ranks
behind one NIC share its link. Needs root (namespaces and qdiscs); `unavailable()` says why not.

    with shaped_namespace("10gbit") as prefix:      # prefix: ["ip", "netns", "exec", NAME]
        subprocess.run([*prefix, *mpirun_argv(2, TCP_OVER_LOOPBACK), ...])"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from contextlib import contextmanager
from typing import Iterator

# Open MPI excludes loopback from TCP by default; in the namespace it is the only interface there is.
TCP_OVER_LOOPBACK = ("btl=self,tcp", "btl_tcp_if_include=lo", "oob_tcp_if_include=lo")


@functools.lru_cache(maxsize=None)
def unavailable() -> str | None:
    """Why a shaped namespace cannot be made here, or None when it can (tried for real once: a
    container may be root without the capabilities namespaces and qdiscs need)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc qdiscs)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs the `{tool}` command (iproute2)"
    try:
        with _namespace("1gbit", "1mb", "10ms"):
            pass
    except RuntimeError as e:
        return f"cannot shape a namespace's loopback here: {e}"
    return None


def _run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")


@contextmanager
def shaped_namespace(rate: str = "10gbit", burst: str = "1mb", latency: str = "10ms") -> Iterator[list[str]]:
    """A namespace whose loopback runs at `rate`; yields the command prefix that runs a program in it,
    and deletes the namespace afterwards (also on errors)."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(f"shaped link: {reason}")
    with _namespace(rate, burst, latency) as prefix:
        yield prefix


@contextmanager
def _namespace(rate: str, burst: str, latency: str) -> Iterator[list[str]]:
    name = f"pycomm-bench-{os.getpid()}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        _run(
            "ip",
            "netns",
            "exec",
            name,
            "tc",
            "qdisc",
            "add",
            "dev",
            "lo",
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            burst,
            "latency",
            latency,
        )
        yield ["ip", "netns", "exec", name]
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
