"""Op matching on the gloo transport, to the MPI transport's guarantee: before a collective moves any
data, every rank's op signature (the core's: kind, count, dtype, root, reduce op, bytes, sequence number;
56 bytes) is all-gathered on a private gloo group of the same ranks, and a difference raises MismatchError
on every rank naming both ranks' ops (the core's check_signatures, the very message MPI gives). The data
op is then never submitted: gloo would abort the process on a size mismatch, and deliver root 0's data
for a broadcast whose root differs between ranks.

Each communicator chains the exchange and its data op on one helper thread, in submission order: an
async_op caller is not blocked until its peers arrive, and the process group still runs the collectives
in the order they were called (its one gloo thread). After a mismatch or a failure the communicator is
broken: ops queued behind it fail without moving data."""
from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
from torch._C._distributed_c10d import AllgatherOptions

from pycomm._build import core
from pycomm.errors import PycommError
from pycomm.gloo_work import GlooWork

if TYPE_CHECKING:
    from pycomm.gloo_transport import GlooTransport

DataOp = Callable[[], Sequence[Any]]   # submits the op's data movement; returns gloo's works


class OpMatcher:
    def __init__(self, transport: "GlooTransport", group: Any) -> None:
        self._t, self._group = transport, group
        self._queue: "queue.SimpleQueue[tuple | None]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"pycomm-gloo-matching-{transport.rank}", daemon=True)
        self._thread.start()

    def submit(self, info: dict, data_op: DataOp, keep: tuple = ()) -> GlooWork:
        """Collective `info`: its signature exchange starts now; `data_op` runs once every rank's signature
        agrees with this one. The returned work completes with the data op (or raises the mismatch)."""
        t = self._t
        mine = torch.tensor(core().op_signature(info["name"], info["count"], info["dtype_code"], info["peer"],
                                                info["redop"], info["bytes"], info["seq"]), dtype=torch.int64)
        table = torch.empty(t.size * mine.numel(), dtype=torch.int64)
        exchange = self._group._allgather_base(table, mine, AllgatherOptions())
        failure: list[PycommError] = []
        done = threading.Event()
        work = GlooWork(t, info, (), keep + (mine, table), done=done, finish=lambda: _raise_first(failure))
        self._queue.put((exchange, table, info, data_op, work, failure, done))
        return work

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            exchange, table, info, data_op, work, failure, done = item
            try:
                exchange.wait()
                core().check_signatures(table.tolist(), self._t.rank, self._t.label)
                self._t.check_usable(info["name"])   # broken by an earlier op: move no data
                work.attach(data_op())
            except PycommError as e:   # the mismatch (or a broken communicator): every later op fails too
                self._t.break_with(str(e))
                failure.append(e)
            except Exception as e:  # noqa: BLE001  (gloo's RuntimeError: a peer died, or gloo's timeout)
                failure.append(self._t.fail(info, e))
            finally:
                done.set()

    def close(self, wait: bool) -> None:
        """No more ops; with `wait`, the queued ones have had their data ops submitted when this returns."""
        self._queue.put(None)
        if wait:
            self._thread.join()

    def abort(self) -> None:
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
