"""The Work objects the "pycomm" torch.distributed backend returns: a torch Work over a pycomm Work.

wait() waits on pycomm's op (so its StallError / MismatchError reach the caller as they are), then
runs the op's finishing step (copies out of staging buffers), then completes the torch Future that
get_future() returned. Callers that only hold the Future (DDP's reducer, FSDP2) are served by a waiter
thread per process group: get_future() hands the Work to it, and it waits in submission order."""

from __future__ import annotations

import datetime
import queue
import threading
import time
from typing import Any, Callable, Optional, Sequence

import torch
from torch._C._distributed_c10d import Work as TorchWork

_POLL_S = 0.001  # wait(timeout): how often a bounded wait looks at the op


class PycommWork(TorchWork):
    """Completion of one torch.distributed op run by pycomm. `works`: pycomm's Works (empty for an op that
    finished on the caller's thread), `result`: the Future's value, `finish`: runs once they complete."""

    def __init__(
        self,
        name: str,
        works: Sequence[Any],
        result: list[torch.Tensor],
        finish: Optional[Callable[[], None]],
        waiter: "Waiter",
    ) -> None:
        super().__init__()
        self._name, self._works, self._result, self._finish = name, list(works), result, finish
        self._waiter = waiter
        self._future: torch.futures.Future = torch.futures.Future()
        self._lock = threading.Lock()
        self._done = False
        self._error: Optional[BaseException] = None
        self._user_future: Optional[torch.futures.Future] = None

    def _complete(self) -> None:
        """Waits for the op once (any thread); later calls re-raise its error."""
        with self._lock:
            if not self._done:
                try:
                    for w in self._works:
                        w.wait()
                    if self._finish is not None:
                        self._finish()
                except BaseException as e:  # the op's own error (StallError, MismatchError, ...) as it is
                    self._error = e
                    self._future.set_exception(e)
                else:
                    self._future.set_result(self._result)
                finally:
                    self._done = True
                    self._works, self._finish = [], None
        if self._error is not None:
            raise self._error

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        """Blocks until the op is done (up to PYCOMM_TIMEOUT, then StallError); a non-zero `timeout` bounds
        the wait (TimeoutError naming the op; the op itself carries on)."""
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout or 0)
        if seconds > 0:
            deadline = time.monotonic() + seconds
            while not self.is_completed():
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"pycomm backend: {self._name} did not complete within wait(timeout={seconds:g} s)"
                    )
                time.sleep(_POLL_S)
        self._complete()
        return True

    def is_completed(self) -> bool:
        with self._lock:
            if self._done:
                return True
            works = list(self._works)
        return all(w.is_completed() for w in works)

    def is_success(self) -> bool:
        return self._done and self._error is None

    def exception(self) -> Optional[BaseException]:
        return self._error

    def result(self) -> list[torch.Tensor]:
        self.wait()
        return self._result

    def get_future(self) -> torch.futures.Future:
        """A Future completed (with the op's output tensors) when the op is, even if nobody waits. A failed
        op fails it with a RuntimeError carrying pycomm's error (wait() raises the error itself): torch's
        Future.set_exception keeps the error where only Python sees it, and C++ callers (DDP's reducer)
        would read the exception object as the op's result."""
        if self._user_future is None:
            self._user_future = self._future.then(_value)  # a raising callback fails the Future in C++
            self._waiter.watch(self)
        return self._user_future

    def synchronize(self) -> None:
        self.wait()

    def __repr__(self) -> str:
        return f"<pycomm backend Work {self._name} {'completed' if self._done else 'pending'}>"


def _value(fut: torch.futures.Future) -> list[torch.Tensor]:
    return fut.value()  # raises the op's error (set_exception's), so the chained Future fails


def done(name: str, result: list[torch.Tensor], waiter: "Waiter") -> PycommWork:
    """The Work of an op that completed on the caller's thread."""
    return PycommWork(name, (), result, None, waiter)


class Waiter:
    """One daemon thread per process group completing the Works whose Futures were asked for, in order
    (a process group's collectives complete in submission order on pycomm's queue)."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._queue: "queue.SimpleQueue[Optional[PycommWork]]" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._start_lock = threading.Lock()

    def watch(self, work: PycommWork) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"pycomm-backend-{self._label}", daemon=True)
                self._thread.start()
        self._queue.put(work)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                work._complete()
            except BaseException:  # noqa: BLE001  (kept in the Work and its Future; the thread goes on)
                pass

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
