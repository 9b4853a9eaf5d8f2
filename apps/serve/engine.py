"""The pipeline's loops. Rank 0 (a thread beside the HTTP server) runs the scheduler and stage 0:
it forms micro-batches, computes its blocks, sends the activations to rank 1, and handles the
tokens the last stage sends back. Ranks 1.. run `serve_stage`: receive from the previous rank,
compute, pass on; the last one samples. One rank alone does it all in one process."""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from typing import Any, Callable

import torch

from apps import failure
from apps.serve import stage_messages
from apps.serve.sampling import Sampler
from apps.serve.scheduler import Generation, Scheduler
from apps.serve.serve_metrics import ServeMetrics
from apps.serve.stage import Stage, split_layers

HEARTBEAT_S = 10.0  # an idle pipeline passes a heartbeat this often: blocked receives stay far below PYCOMM_TIMEOUT
FLUSH_S = 3.0  # on a pipeline failure, how long open streams get to send their final error event


def _compute(stage: Stage, meta: stage_messages.Meta, inputs: torch.Tensor) -> torch.Tensor:
    tic = time.perf_counter_ns()
    out = stage.forward(inputs, meta.rows())
    meta.set_stage_ns(stage.index, time.perf_counter_ns() - tic)
    return out


def _sample(sampler: Sampler, meta: stage_messages.Meta, logits: torch.Tensor) -> None:
    slots = meta.column(stage_messages.SLOT).tolist()
    for slot, new, seed in zip(
        slots, meta.column(stage_messages.NEW).tolist(), meta.column(stage_messages.SEED).tolist()
    ):
        if new:
            sampler.start(slot, seed)
    meta.column(stage_messages.TOKEN)[:] = torch.tensor(
        sampler.sample(
            logits, slots, meta.floats(stage_messages.TEMPERATURE), meta.top_ks(), meta.floats(stage_messages.TOP_P)
        )
    )


def serve_stage(stage: Stage, link: stage_messages.Link) -> None:
    """Ranks 1..P-1: until STOP. The last stage answers every message to rank 0 (tokens, or the
    control message itself), so rank 0 always has exactly one reply per message it sent."""
    sampler = Sampler(stage.cache.k.shape[1]) if stage.last else None
    while True:
        meta, x = link.recv_forward()
        out = _compute(stage, meta, x) if meta.kind == stage_messages.BATCH else None
        if not stage.last:
            link.send_forward(meta, out)
        else:
            if out is not None:
                _sample(sampler, meta, out)
            link.send_back(meta)
        if meta.kind == stage_messages.STOP:
            return


class Engine:
    """Rank 0's side. start() runs the loop in a thread; stop() drains in-flight micro-batches,
    stops the other ranks and joins."""

    def __init__(self, stage: Stage, link: stage_messages.Link | None, scheduler: Scheduler, metrics: ServeMetrics):
        self.stage, self.link, self.scheduler, self.metrics = stage, link, scheduler, metrics
        self.stages = stage.count
        self.sampler = Sampler(scheduler.slots) if stage.last else None  # one rank: stage 0 samples too
        self.in_flight: deque[list[Generation]] = deque()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="apps.serve.engine", daemon=True)
        self.error: BaseException | None = None
        # set by the HTTP side: ends open streams with an error event, returns once they are
        # flushed (or after the given seconds); called before a pipeline failure ends this rank
        self.on_failure: Callable[[str, float], None] = lambda message, timeout: None

    def start(self) -> None:
        self.thread.start()

    def begin_stop(self) -> None:
        """Launch nothing more; the loop ends once the micro-batches in flight are back."""
        self.stopping = True
        self.scheduler.wake.set()

    def stop(self) -> None:
        self.begin_stop()
        self.thread.join()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # the pipeline is broken: end every rank now, with the reason
            self.error = e
            self.on_failure(f"the pipeline failed ({type(e).__name__}: {e}); the server is going down", FLUSH_S)
            failure.fail(e)

    def _loop(self) -> None:
        idle_since = time.monotonic()
        while True:
            while not self.stopping and len(self.in_flight) < self.stages:
                self.scheduler.admit()  # before every micro-batch: one rank alone loops here while it has work
                gens = self.scheduler.next_microbatch()
                if not gens:
                    break
                self._launch(gens)
            self.scheduler.admit()
            if self.stopping and not self.in_flight:
                break
            if self.in_flight:
                # nothing more can start until a micro-batch returns (its sequences' next tokens, or
                # room in the pipeline): block, rather than poll, so the ranks' cores stay free
                self._returned(stage_messages.Meta(self.link.recv_back()))
                idle_since = time.monotonic()
                continue
            if not self.scheduler.wake.wait(timeout=max(0.0, idle_since + HEARTBEAT_S - time.monotonic())):
                self._heartbeat()
                idle_since = time.monotonic()
            self.scheduler.wake.clear()
        self.scheduler.abort_all("the server is shutting down")
        if self.link is not None:
            self.link.send_forward(stage_messages.Meta.control(stage_messages.STOP, self.stages), None)
            self.link.recv_back()  # the last stage's acknowledgement: every rank is done

    def _launch(self, gens: list[Generation]) -> None:
        inputs = [self.scheduler.inputs(g) for g in gens]  # moves a window that would pass the context
        width = max(len(tokens) for _, tokens in inputs)
        ids = torch.zeros(len(gens), width, dtype=torch.long)
        specs = []
        for i, (g, (start, tokens)) in enumerate(zip(gens, inputs)):
            ids[i, : len(tokens)] = torch.tensor(tokens)
            q = g.request
            specs.append(
                stage_messages.RowSpec(
                    g.slot, start, len(tokens), q.top_k, q.seed, not g.seeded, q.temperature, q.top_p
                )
            )
            g.seeded = True
        meta = stage_messages.Meta.batch(self.stages, width, specs)
        out = _compute(self.stage, meta, ids)
        self.in_flight.append(gens)
        self.metrics.in_flight = len(self.in_flight)
        if self.link is None:  # one rank: this stage is also the last
            _sample(self.sampler, meta, out)
            self._returned(meta)
        else:
            self.link.send_forward(meta, out)

    def _heartbeat(self) -> None:
        if self.link is not None:
            self.link.send_forward(stage_messages.Meta.control(stage_messages.HEARTBEAT, self.stages), None)
            self.in_flight.append([])

    def _returned(self, meta: stage_messages.Meta) -> None:
        gens = self.in_flight.popleft()
        self.metrics.in_flight = len(self.in_flight)
        if meta.kind != stage_messages.BATCH:
            return
        slots = meta.column(stage_messages.SLOT).tolist()
        if slots != [g.slot for g in gens]:
            raise RuntimeError(f"pipeline out of order: expected slots {[g.slot for g in gens]}, got {slots}")
        counted = self.scheduler.returned(gens, meta.column(stage_messages.TOKEN).tolist(), self._finish)
        self.metrics.record(meta.stage_ns(), len(gens), counted)

    @staticmethod
    def _finish(gen: Generation) -> None:
        if gen.finish_reason == "length":  # a stop string ends the text where it starts: nothing held is due
            tail = gen.stop.feed(gen.decoder.flush())
            tail += gen.stop.flush()
            gen.finish_reason = "stop" if gen.stop.stopped else "length"
            if tail:
                gen.text.append(tail)
                gen.emit({"token": tail, "done": False})
        end = time.perf_counter()
        total = end - gen.submitted
        ttft = (gen.first_token or end) - gen.submitted
        gen.emit(
            {
                "token": "",
                "done": True,
                "full_text": "".join(gen.text),
                "num_tokens": len(gen.tokens),
                "prompt_tokens": len(gen.request.prompt_ids),
                "finish_reason": gen.finish_reason,
                "context_restarts": gen.restarts,
                "time_to_first_token_ms": round(ttft * 1e3, 3),
                "tokens_per_second": round(len(gen.tokens) / total, 3) if total > 0 else 0.0,
                "total_time_ms": round(total * 1e3, 3),
            }
        )


def random_seed() -> int:
    return random.SystemRandom().randrange(2**62)


def describe_stages(stage_count: int, n_layer: int) -> list[dict[str, Any]]:
    return [{"stage": i, "rank": i, "layers": list(lh)} for i, lh in enumerate(split_layers(n_layer, stage_count))]
