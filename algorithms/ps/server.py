"""The parameter server's loop: one ROUTER socket, one thread. It greets workers (refusing another model's
shapes), answers pushes through the rule (rules.py), answers pulls, tracks who is alive (liveness.py),
names the workers it loses (and their host, where the workers run on several), checkpoints its state
atomically and resumes from it when restarted. It ends when every worker has said goodbye, paused or been
lost.

Preemption: a worker that stops for a preemption says "pause" (with its step) instead of goodbye; the
server stops waiting for it but keeps it expected after a resume (its clock says where it continues).
When `should_stop()` becomes true (the server's own preemption signal) or a push asks for it (a worker's),
every reply carries "stop", so the workers pause at their next step (syncps: all after the same round); the
run ends as preempted when a worker paused (summary["preempted"]).

Only messages signed with the run's secret are read (auth.py); one that is not, or is malformed or implausible
(inbound.py), is dropped, logged once per cause and counted (summary["dropped"]), never answered with
anything a peer without the secret could use, and never applied. The model's signature is never sent.

With servers > 1 each server holds one shard (shards.py). The other server ranks given as `peers` may
greet it, pull its shard and say goodbye without being workers: server 0 gathers the whole model that
way (to evaluate and save it). A server with peers lingers after its workers are done until every peer
has said goodbye (or `linger` seconds passed), so server 0 can take its final shard."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from algorithms.ps import inbound, payload, server_state, wire
from algorithms.ps.liveness import Liveness
from algorithms.ps.rules import Reply, ServerModel
from algorithms.ps.stats import StalenessStats
from algorithms.ps.wire import zmq

STARTUP_GRACE = 120.0  # seconds a worker may take to appear at the start (imports, data loading)


def default_log(text: str) -> None:
    print(f"[ps server] {text}", file=sys.stderr, flush=True)


class Server:
    def __init__(
        self,
        sock: zmq.Socket,
        rank: int,
        workers: list[int],
        model: ServerModel,
        rule: Any,
        stats: StalenessStats,
        signature: str,
        codec: Any,
        timeout: float,
        checkpoint_path: Path | None,
        checkpoint_every: int,
        resume: bool = False,
        log: Callable[[str], None] = default_log,
        peers: tuple[int, ...] = (),
        linger: float = 0.0,
    ):
        self.sock, self.rank, self.workers, self.model, self.rule = sock, rank, workers, model, rule
        self.stats, self.signature, self.codec, self.timeout = stats, signature, codec, timeout
        self.checkpoint_path, self.checkpoint_every, self.log = checkpoint_path, checkpoint_every, log
        self.incarnation = uuid.uuid4().hex[:12]  # changes when the server restarts: workers resynchronise
        self.liveness = Liveness(timeout)
        self.identities: dict[int, bytes] = {}
        self.clocks: dict[int, int] = {}  # per worker: the last step it pushed
        self.refused: dict[int, str] = {}
        self.resumed_from: int | None = None
        self.on_version: Callable[[dict[str, Any]], None] | None = None
        self.should_stop: Callable[[], bool] | None = None  # polled: a preemption of the server itself
        self.stopping = False  # replies ask the workers to pause
        self.paused: dict[int, int] = {}  # per worker that paused for a preemption: its step count
        self._saved_version = model.version
        self.peers, self.linger = set(peers), linger
        self._peers_left = set(peers)  # peers that have not said goodbye yet
        self.greeted_at: dict[int, int] = {}  # per worker: the step its latest greeting said
        self.hosts: dict[int, str] = {}  # per worker: the host its greeting said it runs on
        self.numel = sum(p.numel() for p in model.params)
        self.drops = inbound.Drops(lambda text: self.log(text))  # self.log may be replaced by serve()
        if resume:
            self._restore()

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "params": self.model.vector(),
            "optimizer": self.model.optimizer.state_dict(),
            "version": self.model.version,
            "clocks": dict(self.clocks),
            "stats": self.stats.state_dict(),
            "rule": self.rule.state_dict(),
            "signature": self.signature,
            "finished": sorted(self.liveness.finished - set(self.paused)),
            "lost": dict(self.liveness.lost),
            "paused": dict(self.paused),
        }

    def save(self) -> None:
        if self.checkpoint_path is not None:
            server_state.save(self.checkpoint_path, self.state_dict())
            self._saved_version = self.model.version

    def _restore(self) -> None:
        state = server_state.load(self.checkpoint_path) if self.checkpoint_path is not None else None
        if state is None:
            return
        if state["signature"] != self.signature:
            raise ValueError(
                f"server checkpoint {self.checkpoint_path} was written for another model (shape "
                f"checksum {state['signature']}, this model's is {self.signature}); remove it or "
                "point checkpoint_dir elsewhere"
            )
        payload.unflatten_into(state["params"], self.model.params)
        self.model.optimizer.load_state_dict(state["optimizer"])
        self.model.version = state["version"]
        self.clocks = {int(k): v for k, v in state["clocks"].items()}
        self.stats.load_state_dict(state["stats"])
        self.rule.load_state_dict(state["rule"])
        # a restarted server waits neither for the workers that had finished nor for those it had lost (a
        # lost one that comes back is welcome); paused ones (a preemption) are expected back
        self.liveness.finished = set(state.get("finished", ()))
        self.liveness.lost = {int(k): v for k, v in state.get("lost", {}).items()}
        self.resumed_from = self._saved_version = self.model.version
        self.log(f"resumed from {self.checkpoint_path} at version {self.model.version} (worker clocks {self.clocks})")

    # -- the loop ------------------------------------------------------------------------------
    def serve(self) -> dict[str, Any]:
        """Serve until every worker has finished or been lost; returns a summary."""
        waiting = [w for w in self.workers if w not in self.liveness.finished and w not in self.liveness.lost]
        self.liveness.expect(waiting)
        for w in waiting:  # startup grace: count the timeout from STARTUP_GRACE seconds ahead
            self.liveness.last[w] += max(0.0, STARTUP_GRACE - self.timeout)
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        interval_ms = max(10, int(self.timeout * 250))
        while self.liveness.live:
            if not self.stopping and self.should_stop is not None and self.should_stop():
                self.stopping = True
                self.log(f"preempted: asking workers {_names(self.liveness.live)} to pause at their next step")
            events = dict(poller.poll(interval_ms))
            depth = 0
            while self.sock in events and self.sock.poll(0, zmq.POLLIN):
                self._take()
                depth += 1
            self.stats.queue_depth = depth
            for w in self.liveness.expire():
                if self._spread_over_hosts():  # which node went: the lost workers' host
                    self.liveness.lost[w] += f", on {self.hosts.get(w, 'an unknown host')}"
                self.log(f"worker {w} lost: {self.liveness.lost[w]}; continuing with {_names(self.liveness.live)}")
                self._send_replies(self.rule.lost(w, self.liveness.live))
            self._send_replies(self.rule.tick(self.liveness.live))
            if self.model.version - self._saved_version >= self.checkpoint_every:
                self.save()
        self.save()
        self._linger()
        finished = self.liveness.finished - set(self.paused)
        summary = {
            "version": self.model.version,
            "finished": sorted(finished),
            "lost": dict(self.liveness.lost),
            "refused": dict(self.refused),
            "paused": dict(self.paused),
            "preempted": bool(self.paused),
            "dropped": dict(self.drops.counts),
            **self.stats.as_dict(),
        }
        self.log(
            f"{'paused' if self.paused else 'done'} at version {self.model.version}: finished {_names(finished)}, "
            f"lost {_names(self.liveness.lost)}" + (f", paused {_names(self.paused)}" if self.paused else "")
        )
        return summary

    def _linger(self) -> None:
        """Answer the peers (server 0's final pull) until each has said goodbye or `linger` seconds passed."""
        deadline = time.monotonic() + self.linger
        while self._peers_left and time.monotonic() < deadline:
            if self.sock.poll(100, zmq.POLLIN):
                self._take()
        if self._peers_left:
            self.log(
                f"server rank(s) {_names(self._peers_left)} did not take the final shard within "
                f"{self.linger:g} s; stopping"
            )

    def _take(self) -> None:
        """Receive one message and act on it, or drop it (unsigned, malformed, implausible): never a crash."""
        received = self.drops.receive(self.sock)
        if received is None:
            return
        identity, msg = received
        try:
            self._handle(identity, msg)
        except wire.WireError as e:
            self.drops.note(f"invalid {msg.kind}", f"a {msg.kind} message from rank {msg.get('rank')}: {e}")

    def _handle(self, identity: bytes, msg: wire.Message) -> None:
        worker = msg.get("rank")
        if worker in self.peers:
            self._peer(identity, worker, msg)
            return
        if worker not in self.workers:
            self.drops.note(
                "unknown rank", f"a {msg.kind} message from rank {worker!r}, not a worker (workers: {self.workers})"
            )
            return
        if msg.kind == "heartbeat":
            if worker in self.liveness.last:
                self.liveness.heard(worker)
            return
        if worker in self.refused:
            return
        if msg.kind == "hello":
            self._hello(identity, worker, msg)
            return
        if worker not in self.identities:  # also after a restart: its parameters are not this incarnation's
            self._reply(identity, worker, "error", {"error": "say hello first"}, False)
            return
        if worker in self.liveness.lost:
            self.log(f"worker {worker} is back")
            self.liveness.revive(worker)
        self.liveness.heard(worker)
        self.identities[worker] = identity
        if msg.kind == "push":
            self.stats.pushed += msg.nbytes
            step = inbound.push_header(msg, max(self.clocks.get(worker, -1), self.greeted_at.get(worker, -1)))
            if step <= self.clocks.get(worker, -1):  # sent again after a reconnect: taken once only
                if not self.rule.pending(worker):
                    self._reply(identity, worker, "ack", {"rejected": False, "duplicate": True, "staleness": 0}, True)
                return
            try:
                grad = inbound.gradient(msg, self.codec, self.numel)
            except wire.WireError:  # not applied, its step not taken; the worker takes the parameters, goes on
                self.stats.rejected += 1
                self._reply(identity, worker, "ack", {"rejected": True, "staleness": 0}, True)
                raise
            self.clocks[worker] = step
            if msg.get("stop") and not self.stopping:  # set before the rule answers: this reply says stop too
                self.stopping = True
                self.log(
                    f"worker {worker} was preempted: asking workers {_names(self.liveness.live)} to pause "
                    "at their next step"
                )
            self._send_replies(self.rule.push(worker, msg.header, grad, self.liveness.live))
            if self.on_version is not None:
                self.on_version(
                    {
                        "worker": worker,
                        "loss": msg.get("loss"),
                        "step": msg.get("step"),
                        "lr": (msg.get("lrs") or [None])[0],
                    }
                )
        elif msg.kind == "pull":
            self._reply(identity, worker, "params", {}, True)
        elif msg.kind in ("bye", "pause"):
            inbound.natural(msg, "step", 0)
            if worker not in self.liveness.finished:  # not a goodbye said again (its receipt was lost)
                self.liveness.finish(worker)
                if msg.kind == "pause":
                    self.paused[worker] = int(msg.get("step", 0))
                self.log(
                    f"worker {worker} {'finished' if msg.kind == 'bye' else 'paused (preempted)'} at step "
                    f"{msg.get('step')}"
                )
                self._send_replies(self.rule.lost(worker, self.liveness.live))
                self.save()  # a server restarted from an older checkpoint would wait for a worker that left
            self._reply(identity, worker, "released", {}, False)

    def _peer(self, identity: bytes, peer: int, msg: wire.Message) -> None:
        """Another server rank reading this shard: no liveness, no clock, nothing it sends is applied."""
        if msg.kind == "hello" and msg.get("signature") != self.signature:
            why = f"server rank {peer}'s shard {self.rank} has other shapes/dtypes than this server's"
            self.log(f"{why} (its checksum {msg.get('signature')!r:.40}, this server's {self.signature})")
            self._reply(identity, peer, "error", {"error": why}, False)
        elif msg.kind in ("hello", "pull"):
            self._reply(identity, peer, "welcome" if msg.kind == "hello" else "params", {}, True)
        elif msg.kind == "bye":
            self._peers_left.discard(peer)

    def _hello(self, identity: bytes, worker: int, msg: wire.Message) -> None:
        step = inbound.natural(msg, "step", 0)
        if msg.get("signature") != self.signature:  # the reply never says the server's signature
            why = (
                f"worker {worker}'s model has other shapes/dtypes than the server's: it was started with another "
                "model or optimizer; refused"
            )
            self.log(f"{why} (its checksum {msg.get('signature')!r:.40}, the server's {self.signature})")
            self.refused[worker] = why
            self.liveness.finish(worker)
            self._reply(identity, worker, "error", {"error": why}, False)
            return
        self.greeted_at[worker] = step
        host = msg.get("host")
        if isinstance(host, str) and 0 < len(host) <= 255 and host.isprintable():
            self.hosts[worker] = host
        if worker in self.liveness.lost:
            self.log(f"worker {worker} reconnected")
        self.paused.pop(worker, None)
        self.liveness.revive(worker)
        self.identities[worker] = identity
        self._reply(identity, worker, "welcome", {"clock": self.clocks.get(worker)}, True)

    def _spread_over_hosts(self) -> bool:
        """Whether the workers greeted from more than one host (then a lost worker's names its host)."""
        return len(set(self.hosts.values())) > 1

    def _send_replies(self, replies: list[Reply]) -> None:
        for r in replies:
            if r.worker in self.identities:
                self._reply(self.identities[r.worker], r.worker, r.kind, r.header, r.with_params)

    def _reply(self, identity: bytes, worker: int, kind: str, header: dict[str, Any], with_params: bool) -> None:
        tensors = [self.model.vector()] if with_params else []
        sent = wire.send(
            self.sock,
            kind,
            {
                **header,
                "version": self.model.version,
                "incarnation": self.incarnation,
                "rank": self.rank,
                "stop": self.stopping,
            },
            tensors,
            to=identity,
        )
        if with_params:
            self.stats.pulled += sent


def _names(peers: Any) -> str:
    return ", ".join(map(str, sorted(peers))) or "none"
