"""ssp: bounded-staleness data parallelism without a server (SmolCluster's "ClassicDP"; stale synchronous
parallel, Ho et al. 2013), over the fault-tolerant ZeroMQ layer.

Every rank sends its gradient of step t to every live peer and applies the average of step t (all live
ranks' gradients, in rank order, through its own copy of the optimizer) once it has all of them, steps in
order, so every rank's replica goes through the same sequence of parameters. A rank may start step t only
when step t - K - 1 is complete everywhere (it holds every live rank's gradient of it): the gradient of
step t is computed on parameters that miss at most the K most recent averaged steps, and that number is
the staleness reported (0 for every step when K = 0, which is mbsgd).

Stale gradients add implicit momentum (algorithms/ps/stale_steps.py): with momentum 0.9 and K >= 1 the
plain rule diverges on MNIST (benchmarks/ssp_momentum.py). `staleness_correction="momentum"` (the default)
lowers each step's explicit momentum by the implicit one of that step's mean staleness; "scale" weights each
contribution by 1/(1+s); None is the plain rule of docs/algorithms.md. Every gradient travels with its
staleness, so every replica takes the same corrected step.

A rank that stops being heard for worker_timeout is dropped from the live set (named in the log) and the
steps it had not sent are completed without it. Evaluation and checkpoints are the writer's (`writer_rank`:
the lowest rank not lost), so when rank 0 dies the next rank takes them over.

Checkpoints and preemption: a state_dict holds, beside the steps applied, the gradients of the steps taken
but not yet complete (those that arrived); a resumed replica completes those steps with exactly the saved
gradients and never waits for the rest (their senders restart past them). `pause()` (a preemption) says
goodbye with this rank's step count, so the peers complete their steps without it, then drains: it applies
every step this rank took, so the writer's preempt checkpoint holds no step in flight. A rank killed while sending its gradient to its peers can
leave one peer with that gradient and another without it: their replicas then differ by that one step
(no server holds the truth); they train on.

Only messages signed with the run's secret are read (auth.py); an unsigned, malformed or implausible one
(a gradient with NaN, a step outside the window this rank is in) is dropped and logged once per cause
(inbound.py), never applied and never a crash."""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any

import torch

from algorithms import options as opts
from algorithms import traits
from algorithms.base import CommOptimizer, mark_stepped
from algorithms.ps import inbound, layout, payload, wire
from algorithms.ps.client import WorkerRefusedError
from algorithms.ps.liveness import Heartbeat, Liveness, release
from algorithms.ps.optimizers import FT_OPTIONS, independent_comm, validate_common
from algorithms.ps.rules import ServerModel
from algorithms.ps.server import STARTUP_GRACE
from algorithms.ps.stale_steps import CORRECTIONS, DEFAULT_CORRECTION, momentum_lowered, stale_scale
from algorithms.ps.stats import StalenessStats
from algorithms.ps.wire import zmq
from algorithms.registry import register


def _log(rank: int, text: str) -> None:
    print(f"[ssp rank {rank}] {text}", file=sys.stderr, flush=True)


@register("ssp")
class SSP(CommOptimizer):
    training = traits.WRAPPER
    state_layout = traits.PER_RANK  # ranks may be up to K steps apart when a checkpoint is written
    independent_processes = True  # a rank's death must not end the others (apps' launch reads this)
    algorithm_options: dict[str, Any] = {"staleness_bound": 2, "staleness_correction": DEFAULT_CORRECTION, **FT_OPTIONS}

    def __init__(
        self, optimizer: torch.optim.Optimizer, algorithm: str | None = None, comm: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(optimizer, algorithm, independent_comm(comm), **kwargs)

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = validate_common(config)
        config["staleness_bound"] = opts.integer("staleness_bound", config["staleness_bound"], 0)
        config["staleness_correction"] = opts.choice(
            "staleness_correction", config["staleness_correction"], CORRECTIONS
        )
        return config

    def _broadcast_initial_state(self) -> None:
        """Nothing here: rank 0's parameters arrive with its greeting (_greet)."""

    def _setup(self) -> None:
        wire.require_zmq()
        self.ctx = wire.Context()
        self._heartbeats: list[Heartbeat] = []
        self._release = weakref.finalize(self, release, self.ctx, self._heartbeats)
        self.layout, self.sock = layout.resolve(self.comm, self.ctx, listen=True)
        self.rank, world = self.layout.rank, self.layout.world
        self.peers = [r for r in range(world) if r != self.rank]
        self.links = {
            r: wire.dealer(self.ctx, self.layout.addresses[r], f"ssp-{self.rank}", self.layout.secret, r)
            for r in self.peers
        }
        self.liveness = Liveness(self.options["worker_timeout"])
        self.stats = StalenessStats()
        self.model = ServerModel(self.params, self.optimizer)  # applies averaged steps, counts them
        self.signature = wire.signature(self.params)
        self.pending: dict[int, dict[int, tuple[torch.Tensor, int]]] = {}  # step -> rank -> (gradient, staleness)
        self.final: dict[int, int] = {}  # rank -> steps it took (said goodbye)
        self.frozen: dict[int, list[int]] = {}  # restored steps: they average exactly these ranks' saved gradients
        self.residual = torch.zeros(sum(p.numel() for p in self.params)) if self.options["codec"] else None
        self._heartbeats.append(
            Heartbeat(
                self.ctx,
                self.rank,
                {r: self.layout.addresses[r] for r in self.peers},
                self.options["worker_timeout"] / 4,
                self.layout.secret,
            )
        )
        self._closed = False
        self.numel = sum(p.numel() for p in self.params)
        self.drops = inbound.Drops(lambda text: _log(self.rank, text))
        self._greet()

    @property
    def applied(self) -> int:
        """Averaged steps applied to this replica (the next step to complete)."""
        return self.model.version

    @property
    def writer_rank(self) -> int:
        """The rank that evaluates and checkpoints, as this rank sees it: the lowest rank not lost."""
        return min(r for r in range(self.layout.world) if r not in self.liveness.lost)

    # -- messages --------------------------------------------------------------------------------
    def _send(self, peer: int, kind: str, header: dict[str, Any], tensors: list[torch.Tensor] = ()) -> None:
        self.stats.pushed += wire.send(self.links[peer], kind, {**header, "rank": self.rank}, tensors)

    def _greet(self) -> None:
        """Greet every peer (rank 0 with its parameters, which the others adopt); wait for rank 0's greeting."""
        params = [payload.flatten(self.params)] if self.rank == 0 else []
        for r in self.peers:
            self._send(r, "hello", {"signature": self.signature}, params)
        self.liveness.expect(self.peers)
        for r in self.peers:
            self.liveness.last[r] += max(0.0, STARTUP_GRACE - self.liveness.timeout)
        self._greeted = self.rank == 0
        deadline = time.monotonic() + STARTUP_GRACE
        while not self._greeted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"ssp rank {self.rank}: rank 0 did not greet within {STARTUP_GRACE:g} s")
            self._receive(0.1)

    def _receive(self, timeout: float) -> None:
        """Take the messages that arrive within `timeout` seconds (all that are waiting, at least)."""
        if not self.sock.poll(max(1, int(timeout * 1000)), zmq.POLLIN):
            self._expire()
            return
        depth = 0
        while self.sock.poll(0, zmq.POLLIN):
            depth += 1
            received = self.drops.receive(self.sock)
            if received is None:
                continue
            _, msg = received
            try:
                self._handle(msg)
            except wire.WireError as e:
                self.drops.note(f"invalid {msg.kind}", f"a {msg.kind} message from rank {msg.get('rank')}: {e}")
        self.stats.queue_depth = depth
        self._expire()

    def _handle(self, msg: wire.Message) -> None:
        peer = msg.get("rank")
        if peer not in self.links or peer in self.liveness.lost:
            return
        self.liveness.heard(peer)
        if msg.kind == "hello":
            if msg.get("signature") != self.signature:  # the reply never says this rank's signature
                why = f"rank {peer}'s model has other shapes/dtypes than rank {self.rank}'s: started with another model"
                self._send(peer, "error", {"error": why})
                raise WorkerRefusedError(
                    f"{why} (its checksum {msg.get('signature')!r:.40}, this rank's {self.signature})"
                )
            if peer == 0 and msg.tensors:
                params = inbound.finite_vector("hello", msg.tensors[0].float().reshape(-1), self.numel)
                payload.unflatten_into(params, self.params)
                self._greeted = True
        elif msg.kind == "error":
            raise WorkerRefusedError(f"rank {peer} refused rank {self.rank}: {msg.get('error')}")
        elif msg.kind == "grad":
            self.stats.pulled += msg.nbytes
            step, stale = inbound.natural(msg, "step"), inbound.natural(msg, "staleness", 0)
            if step < self.applied:  # a step completed without it (as before: never used)
                return
            if step > self.steps + self.options["staleness_bound"] + inbound.STEP_AHEAD:
                raise wire.WireError(
                    f"grad of step {step} while this rank has taken {self.steps} steps: further "
                    "ahead than a peer can be"
                )
            if stale > step:  # a gradient of step t misses at most the t steps before it
                raise wire.WireError(f"grad of step {step} with staleness {stale}")
            grad = inbound.gradient(msg, self.options["codec"], self.numel)
            self.pending.setdefault(step, {})[peer] = (grad, stale)
        elif msg.kind == "bye":
            self.final[peer] = inbound.natural(msg, "step")
            self.liveness.finish(peer)

    def _expire(self) -> None:
        for r in self.liveness.expire():
            _log(
                self.rank,
                f"rank {r} lost: {self.liveness.lost[r]}; continuing with ranks "
                f"{', '.join(map(str, sorted(self._members(self.applied))))}",
            )

    def _members(self, step: int) -> list[int]:
        """The ranks whose gradient step `step` averages: this one, the live peers, and the finished ones
        that took that step (for a step restored from a checkpoint: the ranks whose gradients it saved)."""
        if step in self.frozen:
            return self.frozen[step]
        return sorted({self.rank, *self._needing(step)})

    def _complete_ready(self) -> None:
        """Apply every step, in order, whose gradients are all in."""
        while True:
            t = self.applied
            have = self.pending.get(t, {})
            members = self._members(t)
            if not all(r in have for r in members):
                return
            if members:
                self._apply([have[r] for r in members])
            else:
                self.model.version += 1
            self.pending.pop(t, None)
            self.frozen.pop(t, None)

    def _apply(self, contributions: list[tuple[torch.Tensor, int]]) -> None:
        """One averaged step from (gradient, staleness) pairs, corrected as staleness_correction says."""
        correction = self.options["staleness_correction"]
        grads = [g * stale_scale(s) if correction == "scale" else g for g, s in contributions]
        mean = torch.stack(grads).mean(0)
        if correction == "momentum":
            with momentum_lowered(self.optimizer, sum(s for _, s in contributions) / len(contributions)):
                self.model.step(mean, None)
        else:
            self.model.step(mean, None)

    # -- the step --------------------------------------------------------------------------------
    def _step(self, loss: float | None) -> None:
        tic = time.perf_counter()
        t = self.steps
        stale = t - self.applied  # averaged steps missing from the parameters of this gradient
        self.stats.staleness(stale)
        self.stats.calls += 1
        fields, tensors = payload.encode(payload.gradients(self.params), self.options["codec"], self.residual)
        mine = payload.decode(fields, tensors, self.options["codec"])  # this rank's part, as its peers decode it
        self.pending.setdefault(t, {})[self.rank] = (mine, stale)
        for r in self._needing(t):
            self._send(r, "grad", {**fields, "step": t, "staleness": stale}, tensors)
        # step t + 1 may start only once step t + 1 - K - 1 = t - K is complete
        self._wait_until(t + 1 - self.options["staleness_bound"])
        self.stats.seconds += time.perf_counter() - tic
        mark_stepped(self.optimizer)  # it steps K steps later (or at once)

    def _wait_until(self, applied: int) -> None:
        self._receive(0)
        self._complete_ready()
        while self.applied < applied:
            self._receive(self.liveness.timeout / 4)
            self._complete_ready()

    def _needing(self, step: int) -> list[int]:
        """The peers that average step `step`: the live ones, and those that said goodbye after taking it (a
        preempted peer says goodbye before it drains its last steps)."""
        return sorted({*self.liveness.live, *(r for r, n in self.final.items() if n > step)} - set(self.liveness.lost))

    def _goodbye(self) -> None:
        """To every peer not lost, those that left too (each may still be draining the steps this rank took)."""
        for r in self.peers:
            if r not in self.liveness.lost:
                self._send(r, "bye", {"step": self.steps})

    def synchronize(self) -> None:
        """Apply every step this rank has taken (waits for the peers' gradients of them)."""
        self._wait_until(self.steps)

    def close(self) -> None:
        """Finish: apply every step taken, say goodbye to the peers; idempotent."""
        if self._closed:
            return
        self.synchronize()
        self._closed = True
        self._goodbye()
        self._release()

    def pause(self) -> None:
        """Stop for a preemption: goodbye first (the peers, stopping too, then never wait for this rank's
        later steps), then apply every step taken (each peer's gradient arrives or its goodbye does)."""
        if self._closed:
            return
        self._closed = True
        self._goodbye()
        self.synchronize()
        self._release()

    def comm_stats(self) -> dict[str, Any]:
        return self.stats.as_dict()

    def _algorithm_state(self) -> dict[str, Any]:
        in_flight = {t: dict(have) for t, have in self.pending.items() if self.applied <= t < self.steps}
        return {
            "applied": self.applied,
            "stats": self.stats.state_dict(),
            "residual": self.residual,
            "pending": in_flight,
        }

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.model.version = state["applied"]
        self.stats.load_state_dict(state["stats"])
        self.residual = state["residual"]
        saved = {int(t): dict(have) for t, have in state.get("pending", {}).items()}
        self.frozen = {t: sorted(have) for t, have in saved.items()}
        # gradients peers already sent for the steps after the checkpoint (they resumed first) are kept
        self.pending = {**{t: have for t, have in self.pending.items() if t >= self.steps}, **saved}
        missing = [t for t in range(self.applied, self.steps) if t not in self.frozen]
        if missing:  # a checkpoint written before the gradients in flight were saved: those steps are lost
            _log(
                self.rank,
                f"the checkpoint holds no gradient of steps {missing[0]}..{missing[-1]} (taken, not "
                "applied): they are skipped",
            )
            self.frozen.update({t: [] for t in missing})
