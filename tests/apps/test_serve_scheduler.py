"""apps.serve's admission (the scheduler alone, no engine running): a burst of `slots + queue`
requests is taken in full, since free slots are given at submit rather than at the engine's next
look; the request past that is refused with QueueFull naming the queue and the slots. (Served for
real over HTTP: tests/apps/test_serve.py's sixteen concurrent clients.)"""
from __future__ import annotations

import pytest

from apps.serve.scheduler import QueueFull, Request, Scheduler
from apps.serve.text_codec import Vocabulary

SLOTS, QUEUE = 4, 12


def submit(scheduler: Scheduler, seed: int):
    return scheduler.submit(Request([1, 2], 5, 0.0, None, seed), Vocabulary(["a", "b", "c"]).decoder(),
                            lambda event: None)


def test_a_burst_of_slots_plus_queue_is_taken_before_the_engine_looks() -> None:
    scheduler = Scheduler(SLOTS, QUEUE, 2, 16, 8)
    gens = [submit(scheduler, i) for i in range(SLOTS + QUEUE)]
    counts = scheduler.counts()
    assert (counts["active"], counts["queue_depth"], counts["rejected"]) == (SLOTS, QUEUE, 0), counts
    assert sorted(g.slot for g in gens[:SLOTS]) == list(range(SLOTS))
    assert all(g.slot == -1 for g in gens[SLOTS:])
    with pytest.raises(QueueFull, match=rf"queue is full \({QUEUE} requests waiting for one of {SLOTS} slots\)"):
        submit(scheduler, 99)
    assert scheduler.counts()["rejected"] == 1


def test_a_slot_freed_by_a_cancel_goes_to_the_oldest_waiting_request() -> None:
    scheduler = Scheduler(1, 2, 1, 16, 8)
    first, second, third = (submit(scheduler, i) for i in range(3))
    assert (first.slot, second.slot, third.slot) == (0, -1, -1)
    scheduler.cancel(first)
    scheduler.admit()   # the engine's look: the cancelled sequence is not in flight, its slot is freed
    assert (second.slot, third.slot) == (0, -1) and first.done
    counts = scheduler.counts()
    assert (counts["active"], counts["queue_depth"], counts["cancelled"]) == (1, 1, 1), counts
