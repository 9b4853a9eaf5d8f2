"""Continuous batching on rank 0: requests wait in a bounded queue for a sequence slot (a row of
every stage's KV cache); slotted sequences are grouped into micro-batches, up to `depth` (the number
of stages) in flight at once so every stage has work. A sequence is in at most one micro-batch at a
time (its next token needs the previous one), so a micro-batch is re-formed from whichever
sequences are ready: a returned micro-batch goes straight back in, joined by newly admitted ones.

The context window (generation past block_size): a slot's cache holds the positions of the
sequence from its window start on. When the tokens to feed next would pass block_size positions,
the sequence restarts from its last `keep` tokens: the window start moves there, and those tokens
are fed again from position 0 (a re-prefill on every stage, which overwrites the slot's rows).
So every token is computed from the tokens since the window start, at positions counted from it,
as the full forward over that window computes it (the GPT's positions are absolute and learned:
a cache cannot be shifted).

Thread-safety: submit() and cancel() are called from the HTTP server's thread (submit gives a free
slot at once, under the lock); everything else from the engine thread. Events go out through each
request's `emit` callback (engine thread)."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from apps.serve.stop_strings import StopMatcher
from apps.serve.text_codec import StreamDecoder


class QueueFull(RuntimeError):
    pass


@dataclass
class Request:
    """A checked generation request (apps.serve.request_checks builds it)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int | None
    seed: int
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass(eq=False)
class Generation:
    request: Request
    decoder: StreamDecoder
    emit: Callable[[dict[str, Any]], None]
    slot: int = -1
    sequence: list[int] = field(default_factory=list)  # prompt + generated: what the window is cut from
    fed: int = 0  # positions in the KV cache: sequence[window_start:][:fed]
    window_start: int = 0
    pending: list[int] = field(default_factory=list)  # tokens to feed next (the tail of sequence)
    tokens: list[int] = field(default_factory=list)  # generated
    text: list[str] = field(default_factory=list)
    stop: StopMatcher = field(default_factory=lambda: StopMatcher(()))
    finish_reason: str | None = None  # "length" (max_tokens) or "stop" (a stop string)
    seeded: bool = False  # the last stage has seeded this slot's generator
    restarts: int = 0  # times the window moved
    in_flight: bool = False
    cancelled: bool = False
    done: bool = False
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None

    def next_inputs(self, block_size: int, keep: int) -> tuple[int, list[int]]:
        """(first position, tokens) to feed now; moves the window when they would not fit."""
        if self.fed + len(self.pending) > block_size:
            self.window_start = len(self.sequence) - keep
            self.pending = self.sequence[self.window_start :]
            self.fed = 0
            self.restarts += 1
        start, tokens = self.fed, self.pending
        self.fed += len(tokens)
        self.pending = []
        return start, tokens


class Scheduler:
    def __init__(self, slots: int, queue_limit: int, depth: int, block_size: int, keep: int):
        if not 1 <= keep <= block_size:
            raise ValueError(f"--window-keep must be between 1 and the block size {block_size}, got {keep}")
        self.slots, self.queue_limit, self.depth = slots, queue_limit, depth
        self.block_size, self.keep = block_size, keep
        self.free = list(range(slots))[::-1]
        self.waiting: deque[Generation] = deque()
        self.active: list[Generation] = []
        self.lock = threading.Lock()
        self.wake = threading.Event()  # set when there is something for the engine to look at
        self.completed = self.cancelled_count = self.rejected = self.context_restarts = 0

    # ---- HTTP side ---------------------------------------------------------------------------
    def submit(self, request: Request, decoder: StreamDecoder, emit: Callable[[dict[str, Any]], None]) -> Generation:
        with self.lock:
            if len(self.waiting) >= self.queue_limit:
                self.rejected += 1
                raise QueueFull(
                    f"the queue is full ({len(self.waiting)} requests waiting for one of "
                    f"{self.slots} slots); retry later"
                )
            gen = Generation(
                request,
                decoder,
                emit,
                sequence=list(request.prompt_ids),
                pending=list(request.prompt_ids),
                stop=StopMatcher(request.stop),
            )
            self.waiting.append(gen)
            self._fill_free_slots()  # now, not at the engine's next look: a burst of slots + queue fits
        self.wake.set()
        return gen

    def cancel(self, gen: Generation) -> None:
        """The client went away: stop generating and free its slot (once its micro-batch is back)."""
        with self.lock:
            if gen.done or gen.cancelled:
                return
            gen.cancelled = True
        self.wake.set()

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {
                "queue_depth": len(self.waiting),
                "active": len(self.active),
                "slots": self.slots,
                "queue_limit": self.queue_limit,
                "completed": self.completed,
                "cancelled": self.cancelled_count,
                "rejected": self.rejected,
                "context_restarts": self.context_restarts,
            }

    # ---- engine side -------------------------------------------------------------------------
    def admit(self) -> None:
        """Drop cancelled sequences that are not in flight; give free slots to waiting requests."""
        with self.lock:
            for gen in [g for g in self.active if g.cancelled and not g.in_flight]:
                self._release(gen)
            for gen in [g for g in self.waiting if g.cancelled]:
                self.waiting.remove(gen)
                self.cancelled_count += 1
                gen.done = True
            self._fill_free_slots()

    def _fill_free_slots(self) -> None:
        """Waiting requests take free slots, oldest first (the lock is held)."""
        while self.free and self.waiting:
            gen = self.waiting.popleft()
            gen.slot = self.free.pop()
            self.active.append(gen)

    def _release(self, gen: Generation) -> None:
        self.active.remove(gen)
        self.free.append(gen.slot)
        if gen.cancelled and not gen.done:
            self.cancelled_count += 1
        gen.done = True

    def abort_all(self, message: str) -> None:
        """Shutdown: every waiting and active generation ends with an error event."""
        with self.lock:
            gens = list(self.waiting) + list(self.active)
            self.waiting.clear()
            self.active.clear()
            self.free = list(range(self.slots))[::-1]
        for gen in gens:
            if not gen.cancelled:
                gen.done = True
                gen.emit(
                    {
                        "token": "",
                        "done": True,
                        "error": message,
                        "full_text": "".join(gen.text),
                        "num_tokens": len(gen.tokens),
                    }
                )

    def next_microbatch(self) -> list[Generation]:
        """Ready sequences for the next micro-batch: at most ceil(active / depth) of them, so that the
        active sequences spread over `depth` micro-batches (one per stage)."""
        with self.lock:
            ready = [g for g in self.active if not g.in_flight and not g.cancelled and g.pending]
            size = max(1, math.ceil(len(self.active) / self.depth))
            chosen = ready[:size]
            for g in chosen:
                g.in_flight = True
            return chosen

    def inputs(self, gen: Generation) -> tuple[int, list[int]]:
        """(first position, tokens) the micro-batch feeds for `gen` (engine thread)."""
        restarts = gen.restarts
        start, tokens = gen.next_inputs(self.block_size, self.keep)
        self.context_restarts += gen.restarts - restarts
        return start, tokens

    def returned(self, gens: list[Generation], tokens: list[int], finish: Callable[[Generation], None]) -> int:
        """A micro-batch's sampled tokens; `finish` is called on sequences that are complete.
        Returns the number of tokens that count as generated."""
        counted = 0
        finished = []
        for gen, token in zip(gens, tokens):
            gen.in_flight = False
            if gen.cancelled:
                continue
            if gen.first_token is None:
                gen.first_token = time.perf_counter()
            gen.tokens.append(token)
            gen.sequence.append(token)
            counted += 1
            text = gen.stop.feed(gen.decoder.feed(token))
            if text:
                gen.text.append(text)
                gen.emit({"token": text, "done": False})
            if gen.stop.stopped:
                gen.finish_reason = "stop"
            elif len(gen.tokens) >= gen.request.max_tokens:
                gen.finish_reason = "length"
            else:
                gen.pending = [token]
                continue
            finished.append(gen)
        with self.lock:
            for gen in finished:
                self.completed += 1
                self._release(gen)
            for gen in gens:
                if gen.cancelled and gen in self.active:
                    self._release(gen)
        for gen in finished:
            finish(gen)
        return counted
