"""Bad-argument cases of pycomm.TCPStore."""

from __future__ import annotations

from typing import Iterator

import pycomm
from tests.comm.bad_arguments.cases import (
    BAD_BOOL,
    BAD_INT64,
    BAD_INT_NONNEGATIVE,
    BAD_INT_POSITIVE,
    BAD_KEY,
    BAD_TIMEOUT,
    BAD_VALUE,
    HOST,
    Case,
    vary,
)

_STORE: pycomm.TCPStore | None = None


def store() -> pycomm.TCPStore:
    """One single-rank store shared by the cases (served in this process)."""
    global _STORE
    if _STORE is None:
        _STORE = pycomm.TCPStore(HOST, 0, 1, is_server=True, timeout=30)
        _STORE.set("counter-is-bytes", b"abc")
    return _STORE


def store_cases() -> Iterator[Case]:
    yield from vary(
        "TCPStore",
        pycomm.TCPStore,
        lambda: dict(host=HOST, port=0, world_size=1, is_server=True, timeout=30.0),
        dict(
            host=[("int", 5), ("None", None)],
            port=BAD_INT_NONNEGATIVE + [("70000", 70000)],
            world_size=BAD_INT_POSITIVE,
            is_server=BAD_BOOL,
            timeout=BAD_TIMEOUT + [("zero", 0)],
        ),
    )
    s = store
    yield from vary(
        "TCPStore.set",
        lambda **kw: s().set(**kw),
        lambda: dict(key="k", value=b"v"),
        dict(key=BAD_KEY, value=BAD_VALUE),
    )
    yield from vary(
        "TCPStore.get",
        lambda **kw: s().get(**kw),
        lambda: dict(key="counter-is-bytes", timeout=1.0),
        dict(key=BAD_KEY, timeout=BAD_TIMEOUT),
    )
    yield from vary(
        "TCPStore.add", lambda **kw: s().add(**kw), lambda: dict(key="n", delta=1), dict(key=BAD_KEY, delta=BAD_INT64)
    )
    yield Case("TCPStore.add", "key", "key holding bytes", lambda: s().add("counter-is-bytes", 1))
    yield from vary("TCPStore.check", lambda **kw: s().check(**kw), lambda: dict(key="k"), dict(key=BAD_KEY))
    yield from vary(
        "TCPStore.wait",
        lambda **kw: s().wait(**kw),
        lambda: dict(keys=["counter-is-bytes"], timeout=1.0),
        dict(keys=[("str", "k"), ("None", None), ("list of ints", [1])], timeout=BAD_TIMEOUT),
    )
    yield from vary(
        "TCPStore.barrier", lambda **kw: s().barrier(**kw), lambda: dict(timeout=1.0), dict(timeout=BAD_TIMEOUT)
    )
