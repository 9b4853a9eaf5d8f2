"""asyncps and syncps: parameter servers as CommOptimizers (training trait SERVER).

    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm="asyncps",
                                   model=model, pull_every=2, staleness_bound=4, codec="int8")
    if opt.is_server:
        opt.serve()            # until every worker has finished or been lost
    else:
        for batch in data: loss.backward(); opt.step(); opt.zero_grad()
        opt.close()            # goodbye to the server

Ranks 0 .. servers-1 serve, the others are workers. Workers never step their own optimizer: a step pushes
the gradient (with the version of the parameters it was computed on, the step's learning rates and loss)
and adopts the parameters the server sends back (asyncps: every pull_every steps, or at once when a push
is rejected; syncps: every step, after the round). The server owns the parameters and the optimizer state
(rules.py has the update rules). Transport, roles and addresses: wire.py, layout.py.

With servers > 1 the parameters are sharded (shards.py): each server runs the rule on its shard with its
own version, and a worker pushes each shard's slice of the gradient to its server (every push is sent
before the first answer is awaited, so the servers apply them at once) and adopts each shard's answer;
a push rejected by any shard makes the worker pull every shard. Server 0 gathers the other shards
(opt.pull()) to hold the whole model: apps evaluate and save it there."""

from __future__ import annotations

import time
import warnings
import weakref
from typing import Any, Callable

import torch

import pycomm
from algorithms import options as opts
from algorithms import traits
from algorithms.base import CommOptimizer, mark_stepped
from algorithms.ps import layout, payload, server_state, shards, wire
from algorithms.ps.client import ServerLink, ServerLostError
from algorithms.ps.liveness import Heartbeat, release
from algorithms.ps.rules import AsyncRule, ServerModel, SyncRule
from algorithms.ps.server import Server, default_log
from algorithms.ps.stale_steps import ASYNC_CORRECTIONS, DEFAULT_CORRECTION
from algorithms.ps.stats import StalenessStats
from algorithms.registry import register

FT_OPTIONS: dict[str, Any] = {"worker_timeout": 30.0, "server_timeout": 300.0}


def validate_common(config: dict[str, Any]) -> dict[str, Any]:
    """The options every fault-tolerant algorithm shares."""
    config["worker_timeout"] = opts.number("worker_timeout", config["worker_timeout"], 0.05)
    config["server_timeout"] = opts.number("server_timeout", config["server_timeout"], config["worker_timeout"])
    if config["codec"] is not None and not isinstance(config["codec"], pycomm.Int8Codec):
        raise opts.OptionError(
            f"codec must be None or 'int8' (pycomm.Int8Codec) for pushes over the wire, got "
            f"{type(config['codec']).__name__}"
        )
    return config


def independent_comm(comm: Any) -> Any:
    """Processes started independently (layout.from_env) have no MPI job: pycomm runs locally in each."""
    if comm is None and layout.from_env() is not None:
        return pycomm.world() if pycomm.is_initialized() else pycomm.init(backend="local")
    return comm


class ParameterServer(CommOptimizer):
    training = traits.SERVER
    state_layout = traits.IDENTICAL  # the server's parameters are the model; workers hold copies
    independent_processes = True  # a worker's death must not end the server or the others
    algorithm_options: dict[str, Any] = {
        "servers": 1,
        "pull_every": 1,
        **FT_OPTIONS,
        "checkpoint_dir": None,
        "checkpoint_every": 100,
        "resume": False,
    }

    def __init__(
        self, optimizer: torch.optim.Optimizer, algorithm: str | None = None, comm: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(optimizer, algorithm, independent_comm(comm), **kwargs)

    @classmethod
    def data_position(cls, rank: int, world: int, options: dict[str, Any]) -> tuple[int, int]:
        """Ranks 0 .. servers-1 serve and take no data; the workers share it."""
        roles = pycomm.mesh.server_roles(rank, world, options.get("servers", 1))
        return (0 if roles.is_server else roles.index), max(1, len(roles.workers))

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = validate_common(config)
        config["servers"] = opts.integer("servers", config["servers"], 1)
        config["pull_every"] = opts.integer("pull_every", config["pull_every"], 1)
        config["checkpoint_every"] = opts.integer("checkpoint_every", config["checkpoint_every"], 1)
        config["resume"] = opts.flag("resume", config["resume"])
        if config["checkpoint_dir"] is not None and not isinstance(config["checkpoint_dir"], str):
            config["checkpoint_dir"] = str(config["checkpoint_dir"])
        return config

    def _broadcast_initial_state(self) -> None:
        """Nothing: workers take the server's parameters when they greet it."""

    def _setup(self) -> None:
        env = layout.from_env()
        rank = env.rank if env is not None else self.comm.rank
        self.is_server = pycomm.mesh.server_roles(
            rank, env.world if env else self.comm.size, self.options["servers"]
        ).is_server
        wire.require_zmq()
        self.ctx = wire.Context()
        self._heartbeats: list[Heartbeat] = []
        self._release = weakref.finalize(self, release, self.ctx, self._heartbeats)
        self.layout, sock = layout.resolve(self.comm, self.ctx, listen=self.is_server)
        if self.options["servers"] >= self.layout.world:
            raise opts.OptionError(
                f"servers={self.options['servers']} leaves no worker in a world of "
                f"{self.layout.world} processes; start more processes or use fewer servers"
            )
        self.stats = StalenessStats()
        servers = self.options["servers"]
        self.shards = shards.split(self.params, servers)
        self.signatures = [wire.signature(sh.params(self.params)) for sh in self.shards]
        self.versions = [0] * servers  # per shard: the server version of the parameters held
        self.server: Server | None = None
        self.workers = list(pycomm.mesh.server_roles(rank, self.layout.world, servers).workers)
        self._closed = False
        self.stop_requested = False  # a worker: its servers ask it to pause (a preemption)
        self._asked_to_stop = False  # a worker: its pushes ask the servers to stop the run
        self.continue_at: int | None = None  # a worker: the step after the last its servers took (their clocks)
        self.links: list[ServerLink] = []  # a worker's to every server; server 0's to the others (gathering)
        timeout = self.options["worker_timeout"]
        if self.is_server:
            assert sock is not None
            model = ServerModel(self.shards[rank].params(self.params), self.optimizer)
            directory = self.options["checkpoint_dir"]
            peers = (0,) if rank > 0 else ()  # shard servers answer server 0's gathering pulls
            state_path = server_state.path_for(directory, rank) if directory else None
            self.server = Server(
                sock,
                rank,
                self.workers,
                model,
                self._rule(model),
                self.stats,
                self.signatures[rank],
                self.options["codec"],
                timeout,
                state_path,
                self.options["checkpoint_every"],
                resume=self.options["resume"],
                peers=peers,
                linger=self.options["server_timeout"],
            )
            self.versions[rank] = model.version
            if rank == 0:
                self.links = [self._link(s) for s in range(1, servers)]
            return
        self.links = [self._link(s) for s in range(servers)]
        self._heartbeats.append(
            Heartbeat(self.ctx, rank, dict(enumerate(self.layout.addresses[:servers])), timeout / 4, self.layout.secret)
        )
        clocks = []
        for s, link in enumerate(self.links):
            welcome = link.hello()
            self._adopt(s, welcome)
            clocks.append(welcome.get("clock"))
        if any(c is not None for c in clocks):  # a push a shard took is a step taken: continue after the latest
            self.continue_at = max(c for c in clocks if c is not None) + 1
        self.residuals = (
            [torch.zeros(sh.elements[1] - sh.elements[0]) for sh in self.shards]
            if self.options["codec"]
            else [None] * servers
        )

    def _link(self, server: int) -> ServerLink:
        timeout = self.options["worker_timeout"]
        return ServerLink(
            self.ctx,
            self.layout.addresses[server],
            self.rank,
            self.signatures[server],
            2 * timeout + 1.0,
            self.options["server_timeout"],
            self.layout.secret,
            server,
        )

    @property
    def version(self) -> int:
        """The version of the parameters held (with servers > 1: the sum of the shards' versions)."""
        return sum(self.versions)

    def _rule(self, model: ServerModel) -> Any:
        raise NotImplementedError

    @property
    def rank(self) -> int:
        return self.layout.rank

    # -- server --------------------------------------------------------------------------------
    def serve(
        self,
        on_push: Callable[[dict[str, Any]], None] | None = None,
        log: Callable[[str], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> dict[str, Any]:
        """Run the server until every worker has finished, paused or been lost; returns a summary (versions,
        finished, paused and lost workers, "preempted", statistics). `on_push` is called after each push with
        the worker, its loss and step (apps log and evaluate there). `should_stop` (polled) preempts the
        server: the workers are asked to pause at their next step and the run ends as preempted."""
        if self.server is None:
            raise RuntimeError(f"rank {self.rank} is a worker: only ranks < servers={self.options['servers']} serve")
        self.server.on_version = on_push
        self.server.should_stop = should_stop
        if log is not None:
            self.server.log = log
        try:
            summary = self.server.serve()
        finally:
            self.versions[self.rank] = self.server.model.version
        try:
            self.pull()
        except ServerLostError as e:  # a dead shard server: the model keeps that shard as last gathered
            self.server.log(f"could not gather the final shards: {e}")
        for link in self.links:  # server 0 took the final shards: the shard servers may stop
            link.send("bye", {"step": 0})
        return summary

    def pushes_served(self) -> int:
        """Pushes this server has taken from its workers (also before a restart: its clocks are checkpointed)."""
        return sum(c + 1 for c in self.server.clocks.values()) if self.server is not None else 0

    # -- worker --------------------------------------------------------------------------------
    def _pull_now(self) -> bool:
        raise NotImplementedError

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach: bool | None = None
    ) -> torch.Tensor:
        """A worker clips the gradient it is about to push: its own (the server averages or applies the
        pushes as they come), as torch's clip_grad_norm_ on its model's parameters does."""
        if self.server is not None:
            raise RuntimeError(f"rank {self.rank} is a server and holds no gradient: clip on the workers")
        return super().clip_grad_norm_(max_norm, norm_type, error_if_nonfinite, foreach)

    def _step(self, loss: float | None) -> None:
        if self.server is not None:
            raise RuntimeError(f"rank {self.rank} is a server: call opt.serve(), not opt.step()")
        tic = time.perf_counter()
        grad = payload.gradients(self.params)
        common = {
            "step": self.steps,
            "loss": loss,
            "pull": self._pull_now(),
            "lrs": [g["lr"] for g in self.optimizer.param_groups],
            "stop": self._asked_to_stop,
        }
        stale: list[int] = []  # shards whose parameters this step did not refresh
        rejected = False
        # every shard's push goes out before any reply is awaited: the servers apply them at once
        pushes = []
        for shard, link, residual in zip(self.shards, self.links, self.residuals):
            link.step = self.steps  # said again if it greets a restarted server
            fields, tensors = payload.encode(shard.slice(grad), self.options["codec"], residual)
            header = {**fields, **common, "version": self.versions[shard.index]}
            self.stats.pushed += link.post("push", header, tensors)
            pushes.append((shard, link, header, tensors))
        for shard, link, header, tensors in pushes:
            reply, resent = link.reply("push", header, tensors, expect=("ack",))
            self.stats.pushed += resent
            self.stop_requested |= bool(reply.get("stop"))
            if reply.kind == "ack":
                self.stats.staleness(int(reply.get("staleness", 0)))
                self.stats.rejected += bool(reply.get("rejected"))
                rejected |= bool(reply.get("rejected"))
            if not self._adopt(shard.index, reply):
                stale.append(shard.index)
        if rejected:  # a shard refused a stale push: the worker catches up on every shard
            for s in stale:
                self._pull_shard(s)
        self.stats.calls += 1
        self.stats.seconds += time.perf_counter() - tic
        mark_stepped(self.optimizer)  # it never steps on a worker: the server steps

    def _adopt(self, shard: int, reply: wire.Message) -> bool:
        """Take the shard's parameters a reply carries; whether it carried them."""
        if not reply.tensors:
            return False
        payload.unflatten_into(reply.tensors[0], self.shards[shard].params(self.params))
        self.stats.pulled += reply.nbytes
        self.versions[shard] = int(reply.get("version"))
        return True

    def _pull_shard(self, shard: int) -> None:
        link = self.links[shard - 1] if self.server is not None else self.links[shard]
        reply, sent = link.request("pull", {}, [], expect=("params",))
        self.stats.pushed += sent
        self._adopt(shard, reply)

    def pull(self) -> None:
        """Take the servers' current parameters now (e.g. before evaluating). On server 0 with servers > 1:
        gather the other shards, so that its model is the whole current model; on other servers nothing."""
        if self.server is not None and self.rank > 0:
            return
        for shard in self.shards:
            if shard.index != self.rank or self.server is None:
                self._pull_shard(shard.index)

    def close(self) -> None:
        """A worker says goodbye (its servers stop waiting for it); idempotent."""
        self._leave("bye")

    def ask_to_stop(self) -> None:
        """A worker was preempted: its next push asks the servers to stop the run; every worker (this one
        too) then pauses when a reply says so (opt.stop_requested), syncps's all after the same round."""
        self._asked_to_stop = True

    def pause(self) -> None:
        """A worker stops for a preemption: its servers stop waiting for it but expect it back (their clocks
        say where it continues after --resume). Every push it made was answered, so nothing is in flight."""
        self._leave("pause")

    def _leave(self, kind: str) -> None:
        if self._closed:
            return
        self._closed = True
        if self.server is None:
            for link in self.links:
                if not link.leave(kind, {"step": self.steps}):
                    warnings.warn(
                        f"worker {self.rank}: server {link.server} did not confirm its {kind} within "
                        f"server_timeout={link.server_timeout:g} s; it may count this worker as lost",
                        RuntimeWarning,
                        stacklevel=3,
                    )
        self._release()

    def comm_stats(self) -> dict[str, Any]:
        return self.stats.as_dict()

    def _algorithm_state(self) -> dict[str, Any]:
        return {
            "versions": list(self.versions),
            "stats": self.stats.state_dict(),
            "residuals": self.residuals if self.server is None else None,
        }

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        versions = state["versions"] if "versions" in state else [state["version"]]  # saved before sharding
        if len(versions) != len(self.versions):
            raise ValueError(
                f"this checkpoint was saved with {len(versions)} server(s), the run has "
                f"servers={len(self.versions)}: resume with the same servers option"
            )
        self.versions = list(versions)
        self.stats.load_state_dict(state["stats"])
        residuals = state.get("residuals") or ([state["residual"]] if state.get("residual") is not None else None)
        if self.server is None and residuals is not None:
            self.residuals = residuals


@register("asyncps")
class AsyncPS(ParameterServer):
    algorithm_options = {
        **ParameterServer.algorithm_options,
        "staleness_bound": None,
        "staleness_correction": DEFAULT_CORRECTION,
    }

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        config["staleness_bound"] = opts.optional_integer("staleness_bound", config["staleness_bound"], 0)
        config["staleness_correction"] = opts.choice(
            "staleness_correction", config["staleness_correction"], ASYNC_CORRECTIONS
        )
        return config

    def _rule(self, model: ServerModel) -> AsyncRule:
        return AsyncRule(
            model, self.stats, self.options["staleness_bound"], default_log, self.options["staleness_correction"]
        )

    def _pull_now(self) -> bool:
        return (self.steps + 1) % self.options["pull_every"] == 0


@register("syncps")
class SyncPS(ParameterServer):
    algorithm_options = {**ParameterServer.algorithm_options, "polyak_alpha": 0.0}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        config["polyak_alpha"] = opts.fraction("polyak_alpha", config["polyak_alpha"])
        return config

    def _rule(self, model: ServerModel) -> SyncRule:
        return SyncRule(
            model,
            self.stats,
            self.options["pull_every"],
            self.options["polyak_alpha"],
            self.options["worker_timeout"],
            lambda text: self.server.log(text) if self.server else None,
        )

    def _pull_now(self) -> bool:
        return True  # every round's answer carries the new parameters
