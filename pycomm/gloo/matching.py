"""Op matching on the gloo transport, to the MPI transport's guarantee: before a collective moves any
data, every rank's op signature (the core's: kind, count, dtype, root, reduce op, bytes, sequence number;
56 bytes) is all-gathered on a private gloo group of the same ranks, and a difference raises MismatchError
on every rank naming both ranks' ops (the core's check_signatures, the very message MPI gives). The data
op is then never submitted: gloo would abort the process on a size mismatch, and deliver root 0's data
for a broadcast whose root differs between ranks.

Each communicator chains the exchange and its data op on one helper thread, in submission order: an
async_op caller is not blocked until its peers arrive, and the process group still runs the collectives
in the order they were called (its one gloo thread). After a mismatch or a failure the communicator is
broken: ops queued behind it fail without moving data. The helper posts an op's exchange only once the
ops before it matched, so a broken communicator leaves no exchange in gloo that its peers never post:
such an op stays until gloo's timeout, and a gloo group cannot be released before its ops end (its
destructor waits for them, holding the GIL when the garbage collector runs it: the whole process
froze for PYCOMM_TIMEOUT while its peers waited in their next op). The helper waits for an exchange in
slices of POLL_S, so that closing the communicator never leaves it inside gloo (a group torn down
under a waiting thread ends the process in std::terminate)."""

from __future__ import annotations

import datetime
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
from torch._C._distributed_c10d import AllgatherOptions

from pycomm._build import core
from pycomm.errors import PycommError
from pycomm.gloo.work import GlooWork

if TYPE_CHECKING:
    from pycomm.gloo.transport import GlooTransport

DataOp = Callable[[], Sequence[Any]]  # submits the op's data movement; returns gloo's works
POLL_S = 0.5


class _Closed(Exception):
    """The communicator closed while an exchange was pending."""


class OpMatcher:
    def __init__(self, transport: "GlooTransport", group: Any, timeout_s: float) -> None:
        self._t, self._group, self._timeout_s = transport, group, timeout_s
        self._core = core()  # once: each core() call applies the settings again
        self._closing = False
        self._queue: "queue.SimpleQueue[tuple | None]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"pycomm-gloo-matching-{transport.rank}", daemon=True)
        self._thread.start()

    def submit(self, info: dict, data_op: DataOp, keep: tuple = ()) -> GlooWork:
        """Collective `info`: its signature is exchanged once the ops before it matched; `data_op` runs once
        every rank's signature agrees with this one. The returned work completes with the data op (or raises
        the mismatch)."""
        t = self._t
        mine = torch.tensor(
            self._core.op_signature(
                info["name"], info["count"], info["dtype_code"], info["peer"], info["redop"], info["bytes"], info["seq"]
            ),
            dtype=torch.int64,
        )
        table = torch.empty(t.size * mine.numel(), dtype=torch.int64)
        failure: list[PycommError] = []
        done = threading.Event()
        work = GlooWork(t, info, (), keep + (mine, table), done=done, finish=lambda: _raise_first(failure))
        self._queue.put((mine, table, info, data_op, work, failure, done))
        return work

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            mine, table, info, data_op, work, failure, done = item
            try:
                # broken by an op queued before (a mismatch the peers saw too): fail at once, posting nothing
                # the peers that moved on would never match (the split of allreduce_quantized's first call)
                self._t.check_usable(info["name"])
                self._wait(self._group._allgather_base(table, mine, AllgatherOptions()))
                self._core.check_signatures(table.tolist(), self._t.rank, self._t.label)
                self._t.check_usable(info["name"])  # broken meanwhile (the caller's stall): move no data
                work.attach(data_op())
            except PycommError as e:  # the mismatch (or a broken communicator): every later op fails too
                self._t.break_with(str(e))
                failure.append(e)
            except _Closed:
                failure.append(
                    PycommError(
                        f"{info['describe']}: the {self._t.label} was shut down before every rank reached this op"
                    )
                )
            except Exception as e:  # noqa: BLE001  (gloo's RuntimeError: a peer died, or gloo's timeout)
                failure.append(self._t.fail(info, e))
            finally:
                done.set()

    def _wait(self, exchange: Any) -> None:
        """The exchange's completion; gloo's own timeout past PYCOMM_TIMEOUT; _Closed once closing."""
        start = time.monotonic()
        while True:
            try:
                exchange.wait(datetime.timedelta(seconds=POLL_S))
                return
            except RuntimeError as e:
                if not str(e).startswith("Operation timed out"):
                    raise
                if self._closing:
                    raise _Closed() from None
                if 0 < self._timeout_s < time.monotonic() - start:
                    raise

    def close(self, drain: bool) -> None:
        """No more ops. drain: the queued ones have their data ops submitted first (a stalled one: up to
        PYCOMM_TIMEOUT); else they fail. The helper has left gloo when this returns."""
        self._closing = self._closing or not drain
        self._queue.put(None)
        self._thread.join()

    def abort(self) -> None:
        self._closing = True
        self._queue.put(None)
        try:
            self._group.abort()
        except RuntimeError:  # not every torch lets a gloo group abort; the process ends right after anyway
            pass

    def shutdown(self) -> None:
        try:
            self._group.shutdown()
        except RuntimeError:  # a peer already gone: nothing left to release cleanly
            pass


def _raise_first(failure: list[PycommError]) -> None:
    if failure:
        raise failure[0]
