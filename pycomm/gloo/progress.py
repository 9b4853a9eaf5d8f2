"""Where each rank of a gloo communicator is, for its stall reports: as the MPI transport reads its peers'
progress from a one-sided window, each gloo rank publishes in the communicator's store how many collectives
it has submitted and its latest one, every PUBLISH_S from one helper thread per process (a beat counter
with it). A rank whose op stalls reads its peers' records, waiting up to ANSWER_WAIT_S for a fresh one
from each: a peer that answers but has submitted fewer collectives `has not reached` the op; a peer whose
record stops changing is stopped or hung (`did not answer`), inside the op when it had reached it."""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Optional

PUBLISH_S = 0.5
ANSWER_WAIT_S = 4 * PUBLISH_S

_TRACKED: "weakref.WeakSet[Progress]" = weakref.WeakSet()
_LOCK = threading.Lock()
_thread: Optional[threading.Thread] = None


@dataclass(frozen=True)
class Record:
    beat: int
    submitted: int  # collectives submitted on the communicator
    latest: str  # the latest of them, as "allreduce #3" ("" when none)


class Progress:
    """One gloo communicator's rank: its own progress, published, and its peers', read."""

    def __init__(self, store: Any, prefix: str, rank: int, size: int) -> None:
        self._store, self._prefix, self.rank, self.size = store, prefix, rank, size
        self._now: tuple[int, str] = (0, "")  # (collectives submitted, the latest): one tuple, read whole
        self._beat = 0
        self._closed = False
        if size > 1:
            with _LOCK:
                _TRACKED.add(self)
                _start()

    def collective(self, name: str, seq: int) -> int:
        """A collective was submitted: its index among this communicator's collectives (1-based)."""
        submitted = self._now[0] + 1
        self._now = (submitted, f"{name} #{seq}")
        return submitted

    def close(self) -> None:
        self._closed = True
        with _LOCK:
            _TRACKED.discard(self)

    def _key(self, rank: int) -> str:
        return f"{self._prefix}/progress/{rank}"

    def publish(self) -> None:
        self._beat += 1
        submitted, latest = self._now
        self._store.set(self._key(self.rank), f"{self._beat} {submitted} {latest}")

    def _read(self, rank: int) -> Optional[Record]:
        key = self._key(rank)
        try:
            if not self._store.check([key]):
                return None
            beat, submitted, latest = (self._store.get(key).decode().split(" ", 2) + [""])[:3]
            return Record(int(beat), int(submitted), latest)
        except (RuntimeError, ValueError):  # the store is gone (its host rank died) or a record is torn
            return None

    def laggards(self, name: str, seq: int, index: int) -> str:
        """Who op `name #seq` (this rank's collective `index`) waits for, from the peers' fresh records
        (waiting up to ANSWER_WAIT_S for them), as the MPI transport words it. The store is read on a helper
        thread: a store whose host is stopped would block a read for the store's own timeout."""
        peers = [r for r in range(self.size) if r != self.rank]
        read: dict[str, Any] = {}
        reader = threading.Thread(
            target=lambda: read.update(self._collect(peers)), daemon=True, name="pycomm-gloo-progress-read"
        )
        reader.start()
        reader.join(2 * ANSWER_WAIT_S)
        if not read:
            return (
                f"a rank has not reached it (the store holding the ranks' progress did not answer within "
                f"{2 * ANSWER_WAIT_S:g} s)"
            )
        first, fresh = read["first"], read["fresh"]
        op = f"{name} #{seq}"
        details, waiting = [], []
        for r in peers:
            record = fresh.get(r) or first[r]
            where = (
                "it has submitted no collective on this communicator"
                if record is None or not record.submitted
                else f"its latest collective is {record.latest}"
            )
            if r not in fresh:
                reached = record is not None and record.submitted >= index
                details.append(
                    f"rank {r} did not answer within {ANSWER_WAIT_S:g} s ({where}; its process is stopped "
                    f"or hung{', inside ' + op if reached else ''})"
                )
            elif record.submitted < index:
                details.append(f"rank {r} has not reached {op} ({where})")
            else:
                continue
            waiting.append(r)
        if not waiting:
            return f"every other rank has reached {op} and answers (one may be stuck inside it)"
        return f"waiting for rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))}: " + "; ".join(
            details
        )

    def _collect(self, peers: list[int]) -> dict[str, Any]:
        """The peers' records as first read, and those published since (a beat later), within ANSWER_WAIT_S."""
        first = {r: self._read(r) for r in peers}
        fresh: dict[int, Record] = {}
        deadline = time.monotonic() + ANSWER_WAIT_S
        while True:
            for r in peers:
                now = self._read(r)
                if r not in fresh and now is not None and (first[r] is None or now.beat != first[r].beat):
                    fresh[r] = now
            if len(fresh) == len(peers) or time.monotonic() >= deadline:
                return {"first": first, "fresh": fresh}
            time.sleep(PUBLISH_S / 5)


def _start() -> None:
    """The publishing thread, once per process (under _LOCK)."""
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_publish_all, name="pycomm-gloo-progress", daemon=True)
        _thread.start()


def _publish_all() -> None:
    global _thread
    while True:
        with _LOCK:
            tracked = list(_TRACKED)
            if not tracked:
                _thread = None  # under _LOCK: the next communicator starts another
                return
        for progress in tracked:
            if progress._closed:
                continue
            try:
                progress.publish()
            except RuntimeError:  # the store is gone (the job is ending): nothing more to say
                progress.close()
        del tracked, progress
        time.sleep(PUBLISH_S)
