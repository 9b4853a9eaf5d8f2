"""The handle of one op of the gloo transport (pycomm/gloo/transport.py), with the interface of
pycomm._C.Work that Communicator and pycomm.Work use: wait(stream, timeout_s), synchronize(timeout_s),
is_completed(), info; plus `received` for receives (pycomm/p2p.py reads it)."""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from pycomm import op_stats, tracing
from pycomm.errors import PycommError

if TYPE_CHECKING:
    from pycomm.gloo.transport import GlooTransport


def describe(info: dict) -> str:
    """An op as the core's OpInfo::describe() writes it, e.g. "allreduce #3 (count 5, float32, 20 bytes, op SUM)"."""
    parts = [f"count {info['count']}", info["dtype"], f"{info['bytes']} bytes"]
    if info.get("op"):
        parts.append(f"op {info['op']}")
    if info["peer"] >= 0:
        parts.append(f"{'root' if info['name'] == 'broadcast' else 'peer'} {info['peer']}")
    if info.get("tag", -1) >= 0:
        parts.append(f"tag {info['tag']}")
    if info["bucket"] >= 0:
        parts.append(f"bucket {info['bucket']}")
    return f"{info['name']} #{info['seq']} ({', '.join(parts)})"


class GlooWork:
    """One op in flight: gloo collectives' works to wait for, or a helper thread's `done` event (point
    to point: gloo's send/recv works complete only inside their one allowed wait()), then `finish` (may
    raise, e.g. MismatchError). Interface of pycomm._C.Work."""

    def __init__(
        self,
        transport: "GlooTransport",
        info: dict,
        works: Sequence[Any] = (),
        keep: tuple = (),
        done: Any = None,
        finish: Optional[Callable[[], None]] = None,
    ) -> None:
        self._t, self._info, self._works, self._keep = transport, info, list(works), keep
        self._done_event, self._finish = done, finish
        self._start = time.perf_counter()
        if "trace" in info:  # handed to gloo: on the wire (gloo's own thread runs it)
            tracing.record_phase(info["name"], phase="wire", **info["trace"])
        self.received: Optional[tuple] = None  # receives: (source, tag, dtype code, count, shape, data)
        self._settled = False
        self._error: Optional[BaseException] = None

    @property
    def info(self) -> dict:
        return self._info

    def attach(self, works: Sequence[Any]) -> None:
        """The gloo works of an op whose data movement was submitted after the work was made (op matching:
        pycomm/gloo/matching.py), before its `done` event is set."""
        self._works = list(works)

    def is_completed(self) -> bool:
        if self._settled:
            return True
        if (self._done_event is not None and not self._done_event.is_set()) or not all(
            w.is_completed() for w in self._works
        ):
            return False
        self._settle()
        return True

    def wait(self, stream: int = 0, timeout_s: float = 0.0) -> None:
        if not self._settled:
            deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
            if self._done_event is not None and not self._done_event.wait(self._left(deadline)):
                self._stall(timeout_s)
            error: Optional[BaseException] = None
            for w in self._works:
                try:
                    if deadline is None:
                        w.wait()
                    else:
                        w.wait(datetime.timedelta(seconds=max(self._left(deadline) or 0.0, 1e-3)))
                except RuntimeError as e:
                    if str(e).startswith("Operation timed out"):  # our deadline, not the op's failure
                        self._stall(timeout_s)
                    error = e
                    break
            self._settle(error, waited=True)
        if self._error is not None:
            raise self._error

    def synchronize(self, timeout_s: float = 0.0) -> None:
        self.wait(0, timeout_s)

    @staticmethod
    def _left(deadline: Optional[float]) -> Optional[float]:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _settle(self, error: Optional[BaseException] = None, waited: bool = False) -> None:
        """Once complete: keep the first error (named), run `finish`, count the op."""
        self._settled = True
        try:
            if error is not None:
                raise error
            if not waited:
                for w in self._works:
                    w.wait()  # a completed collective's wait returns at once, or raises the op's error
            if self._finish is not None:
                self._finish()
        except PycommError as e:
            self._error = e
        except Exception as e:  # gloo's RuntimeError: a peer died, or gloo's own timeout fired
            self._error = self._t.fail(self._info, e)
        self._keep = ()
        self._works = []  # they hold gloo's context: released now, not at interpreter teardown (see shutdown)
        info = self._info
        if "trace" in info:  # done when this side learns of it (gloo's works carry no completion time)
            facts = dict(info["trace"])
            if self.received is not None and facts["peer"] < 0:
                facts["peer"] = self.received[0]  # a receive from any source: the sender
            tracing.record_phase(info["name"], phase="failed" if self._error is not None else "done", **facts)
        op_stats.record(
            info["name"], info["bytes"], info["bytes"] * info["bus_factor"], time.perf_counter() - self._start
        )

    def _stall(self, timeout_s: float) -> None:
        raise self._t.fail(self._info, None, timeout_s)
