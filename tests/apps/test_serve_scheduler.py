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
    return scheduler.submit(
        Request([1, 2], 5, 0.0, None, seed), Vocabulary(["a", "b", "c"]).decoder(), lambda event: None
    )


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


def test_cancelled_requests_free_their_place_once_back_from_the_pipeline() -> None:
    scheduler = Scheduler(1, 2, 2, 8, 4)
    gens = [submit(scheduler, i) for i in range(3)]  # one slotted, two waiting
    batch = scheduler.next_microbatch()
    assert batch == [gens[0]] and scheduler.next_microbatch() == []  # in flight: not in a second micro-batch
    scheduler.cancel(gens[0])  # in flight: its slot is freed when its micro-batch is back
    scheduler.cancel(gens[1])  # waiting: it leaves the queue at the engine's next look
    scheduler.admit()
    assert gens[2].slot == -1 and scheduler.counts()["active"] == 1
    scheduler.returned(batch, [1], lambda g: None)  # a cancelled sequence's token is dropped, its slot freed
    scheduler.admit()
    assert gens[2].slot == 0 and gens[0].done and gens[1].done
    counts = scheduler.counts()
    assert (counts["active"], counts["queue_depth"], counts["cancelled"]) == (1, 0, 2), counts
