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
(rules.py has the update rules). Transport, roles and addresses: wire.py, layout.py."""
from __future__ import annotations

import time
import weakref
from typing import Any, Callable

import torch

import pycomm
from algorithms import options as opts
from algorithms import traits
from algorithms.base import CommOptimizer
from algorithms.ps.wire import zmq
from algorithms.ps import checkpoint, layout, payload, wire
from algorithms.ps.client import ServerLink
from algorithms.ps.liveness import Heartbeat, release
from algorithms.ps.rules import AsyncRule, ServerModel, SyncRule
from algorithms.ps.server import Server, default_log
from algorithms.ps.stats import StalenessStats
from algorithms.registry import register

FT_OPTIONS: dict[str, Any] = {"worker_timeout": 30.0, "server_timeout": 300.0}


def validate_common(config: dict[str, Any]) -> dict[str, Any]:
    """The options every fault-tolerant algorithm shares."""
    config["worker_timeout"] = opts.number("worker_timeout", config["worker_timeout"], 0.05)
    config["server_timeout"] = opts.number("server_timeout", config["server_timeout"], config["worker_timeout"])
    if config["codec"] is not None and not isinstance(config["codec"], pycomm.Int8Codec):
        raise opts.OptionError(f"codec must be None or 'int8' (pycomm.Int8Codec) for pushes over the wire, got "
                               f"{type(config['codec']).__name__}")
    return config


def independent_comm(comm: Any) -> Any:
    """Processes started independently (layout.from_env) have no MPI job: pycomm runs locally in each."""
    if comm is None and layout.from_env() is not None:
        return pycomm.world() if pycomm.is_initialized() else pycomm.init(backend="local")
    return comm


class ParameterServer(CommOptimizer):
    training = traits.SERVER
    state_layout = traits.IDENTICAL   # the server's parameters are the model; workers hold copies
    independent_processes = True      # a worker's death must not end the server or the others
    algorithm_options: dict[str, Any] = {"servers": 1, "pull_every": 1, **FT_OPTIONS,
                                         "checkpoint_dir": None, "checkpoint_every": 100, "resume": False}

    def __init__(self, optimizer: torch.optim.Optimizer, algorithm: str | None = None, comm: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(optimizer, algorithm, independent_comm(comm), **kwargs)

    @classmethod
    def data_position(cls, rank: int, world: int, options: dict[str, Any]) -> tuple[int, int]:
        """Ranks 0 .. servers-1 serve and take no data; the workers share it."""
        servers = options.get("servers", 1)
        return max(0, rank - servers), max(1, world - servers)

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = validate_common(config)
        config["servers"] = opts.integer("servers", config["servers"], 1)
        if config["servers"] > 1:
            raise opts.OptionError(f"servers={config['servers']}: sharding the parameters across several servers is "
                                   "not implemented yet; use servers=1")
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
        self.is_server = rank < self.options["servers"]
        wire.require_zmq()
        self.ctx = zmq.Context()
        self._heartbeats: list[Heartbeat] = []
        self._release = weakref.finalize(self, release, self.ctx, self._heartbeats)
        self.layout, sock = layout.resolve(self.comm, self.ctx, listen=self.is_server)
        if self.options["servers"] >= self.layout.world:
            raise opts.OptionError(f"servers={self.options['servers']} leaves no worker in a world of "
                                   f"{self.layout.world} processes; start more processes or use fewer servers")
        self.stats = StalenessStats()
        self.signature = wire.signature(self.params)
        self.version = 0
        self.server: Server | None = None
        self.workers = list(range(self.options["servers"], self.layout.world))
        self._closed = False
        if self.is_server:
            assert sock is not None
            model = ServerModel(self.params, self.optimizer)
            directory = self.options["checkpoint_dir"]
            self.server = Server(sock, rank, list(range(self.options["servers"], self.layout.world)), model,
                                 self._rule(model), self.stats, self.signature, self.options["codec"],
                                 self.options["worker_timeout"],
                                 checkpoint.path_for(directory, rank) if directory else None,
                                 self.options["checkpoint_every"], resume=self.options["resume"])
            self.version = model.version
            return
        timeout = self.options["worker_timeout"]
        self.link = ServerLink(self.ctx, self.layout.addresses[0], rank, self.signature, 2 * timeout + 1.0,
                               self.options["server_timeout"])
        self._heartbeats.append(Heartbeat(self.ctx, rank, [self.layout.addresses[0]], timeout / 4))
        self._adopt(self.link.hello())
        self.residual = torch.zeros(sum(p.numel() for p in self.params)) if self.options["codec"] else None

    def _rule(self, model: ServerModel) -> Any:
        raise NotImplementedError

    @property
    def rank(self) -> int:
        return self.layout.rank

    # -- server --------------------------------------------------------------------------------
    def serve(self, on_push: Callable[[dict[str, Any]], None] | None = None,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Run the server until every worker has finished or been lost; returns a summary (versions,
        finished and lost workers, statistics). `on_push` is called after each push with the worker, its
        loss and step (apps log and evaluate there)."""
        if self.server is None:
            raise RuntimeError(f"rank {self.rank} is a worker: only ranks < servers={self.options['servers']} serve")
        self.server.on_version = on_push
        if log is not None:
            self.server.log = log
        try:
            return self.server.serve()
        finally:
            self.version = self.server.model.version

    def save_server(self) -> None:
        """Write the server's checkpoint now (atomic; needs checkpoint_dir)."""
        if self.server is not None:
            self.server.save()

    # -- worker --------------------------------------------------------------------------------
    def _pull_now(self) -> bool:
        raise NotImplementedError

    def _step(self, loss: float | None) -> None:
        if self.server is not None:
            raise RuntimeError(f"rank {self.rank} is the server: call opt.serve(), not opt.step()")
        tic = time.perf_counter()
        fields, tensors = payload.encode(payload.gradients(self.params), self.options["codec"], self.residual)
        header = {**fields, "version": self.version, "step": self.steps, "loss": loss, "pull": self._pull_now(),
                  "lrs": [g["lr"] for g in self.optimizer.param_groups]}
        reply, sent = self.link.request("push", header, tensors, expect=("ack",))
        self.stats.pushed += sent
        self.stats.calls += 1
        if reply.kind == "ack":
            self.stats.staleness(int(reply.get("staleness", 0)))
            self.stats.rejected += bool(reply.get("rejected"))
        self._adopt(reply)
        self.stats.seconds += time.perf_counter() - tic
        # the wrapped optimizer never steps on a worker (the server steps): tell its LR scheduler that the
        # step took place, as torch's scheduler checks (it patches optimizer.step to set this flag)
        self.optimizer._opt_called = True  # type: ignore[attr-defined]

    def _adopt(self, reply: wire.Message) -> None:
        if reply.tensors:
            payload.unflatten_into(reply.tensors[0], self.params)
            self.stats.pulled += reply.nbytes
            self.version = int(reply.get("version"))

    def pull(self) -> None:
        """Take the server's current parameters now (e.g. before evaluating)."""
        reply, sent = self.link.request("pull", {}, [], expect=("params",))
        self.stats.pushed += sent
        self._adopt(reply)

    def close(self) -> None:
        """A worker says goodbye (the server stops waiting for it); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.server is None:
            self.link.send("bye", {"step": self.steps})
        self._release()

    def comm_stats(self) -> dict[str, Any]:
        return self.stats.as_dict()

    def _algorithm_state(self) -> dict[str, Any]:
        return {"version": self.version, "stats": self.stats.state_dict(), "residual": self.residual
                if self.server is None else None}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.version = state["version"]
        self.stats.load_state_dict(state["stats"])
        if self.server is None and state.get("residual") is not None:
            self.residual = state["residual"]


@register("asyncps")
class AsyncPS(ParameterServer):
    algorithm_options = {**ParameterServer.algorithm_options, "staleness_bound": None}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        config["staleness_bound"] = opts.optional_integer("staleness_bound", config["staleness_bound"], 0)
        return config

    def _rule(self, model: ServerModel) -> AsyncRule:
        return AsyncRule(model, self.stats, self.options["staleness_bound"], default_log)

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
        return SyncRule(model, self.stats, self.options["pull_every"], self.options["polyak_alpha"],
                        self.options["worker_timeout"], lambda text: self.server.log(text) if self.server else None)

    def _pull_now(self) -> bool:
        return True   # every round's answer carries the new parameters
