"""CommOptimizer: the machinery every data-parallel algorithm shares.

An algorithm wraps a torch optimizer (one extra line in a training script) and adds communication
around its step. `CommOptimizer(opt, algorithm="easgd", comm=None, **options)` returns an instance of
the registered class for that name; each class can also be constructed directly.

Wrapping broadcasts rank 0's parameters (those in the optimizer's param_groups) and buffers, so all
ranks start identical. Buffers (e.g. BatchNorm running statistics) are known only through `model=`
(its `buffers()`) or `buffers=` (a list of tensors); pass one of them for models with buffers.

A CommOptimizer is a `torch.optim.Optimizer`: LR schedulers, `torch.amp.GradScaler`, step hooks and
`isinstance` checks take it like the optimizer it wraps, whose `param_groups` and `state` it shares.

`comm=` puts the algorithm on all of a communicator (a 1-D pycomm.Mesh); `mesh=` on its dimension of a
Mesh: `mesh_dim` ("dp", the data-parallel group, for every data-parallel method; ZeRO shards over
dp_shard and replicates over dp_replicate). Wrapping a ZeRO optimizer in a method that declares
`across_shards` runs that method across dp_replicate over ZeRO's master shards (algorithms/composition.py).

SDTL's constructor (tolgadimli/SDTL) is accepted as its README writes it, so its scripts run unchanged:
`CommOptimizer(opt, dist_optim_name="EASGD", world_size=N, comm_period=..., dist_pulling_strength=...,
local_pulling_strength=...)`; `world_size` must equal the communicator's size, and `LSGD` ranks its
workers by SDTL's proxy score unless `leader_metric` is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable, ClassVar

import torch

import pycomm
from algorithms import clipping, composition, state_checks, traits
from algorithms import options as opts
from algorithms.channel import Channel, bytes_across_nodes
from algorithms.optimizer_protocol import OptimizerProtocol
from algorithms.registry import lookup
from algorithms.state_checks import STATE_VERSION

# what a method over a ZeRO optimizer forwards to it (see CommOptimizer.__getattr__)
FROM_INNER = ("no_sync", "memory_bytes", "full_model_state_dict", "close", "synchronize", "remove_hooks")

# SDTL's DistOptimizer names and the option its scripts rely on implicitly (its LSGD ranks by a proxy
# score computed from the step, and its loop passes no loss).
SDTL_IMPLIED_OPTIONS = {"lsgd": {"leader_metric": "proxy"}, "lsgd+": {"leader_metric": "proxy"}}


def _algorithm_name(algorithm: Any, kwargs: dict[str, Any]) -> Any:
    """The algorithm named by `algorithm=` or SDTL's `dist_optim_name=` (one of them, not both)."""
    sdtl = kwargs.get("dist_optim_name")
    if algorithm is not None and sdtl is not None:
        raise TypeError("give algorithm= or SDTL's dist_optim_name=, not both")
    return algorithm if algorithm is not None else sdtl


class CommOptimizer(OptimizerProtocol):
    """Base of all algorithms. Subclasses set `algorithm_options` (their own options with defaults),
    override `_validate`, `_setup`, `_step`, and `_algorithm_state` / `_load_algorithm_state`."""

    name: ClassVar[str] = ""
    # how it is trained and how its state is held (algorithms/traits.py): apps dispatch on these
    training: ClassVar[str] = traits.WRAPPER
    state_layout: ClassVar[str] = traits.PER_RANK
    independent_processes: ClassVar[bool] = False
    common_options: ClassVar[dict[str, Any]] = {"codec": None, "bucket_bytes": None}
    algorithm_options: ClassVar[dict[str, Any]] = {}
    # the Mesh dimension whose communicator the algorithm uses (`self.comm`)
    mesh_dim: ClassVar[str] = "dp"
    # may wrap a ZeRO optimizer and run across dp_replicate over its master shards (composition.py)
    across_shards: ClassVar[bool] = False
    # _setup only derives the method's state from the parameters (no hooks, sockets or processes), so
    # load_full_state_dict restarts that state by running it again
    setup_from_parameters: ClassVar[bool] = False

    def __new__(cls, optimizer: Any = None, algorithm: str | None = None, *args: Any, **kwargs: Any):
        if cls is CommOptimizer:
            algorithm = _algorithm_name(algorithm, kwargs)
            if algorithm is None:
                from algorithms.registry import available

                raise TypeError(
                    "CommOptimizer(optimizer, algorithm=NAME, ...) needs an algorithm; available: "
                    f"{', '.join(available())}"
                )
            cls = lookup(algorithm)
        return super().__new__(cls)

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        algorithm: str | None = None,
        comm: Any = None,
        *,
        mesh: pycomm.Mesh | None = None,
        model: torch.nn.Module | None = None,
        buffers: Iterable[torch.Tensor] | None = None,
        **options: Any,
    ) -> None:
        sdtl = "dist_optim_name" in options
        algorithm = _algorithm_name(algorithm, options)
        options.pop("dist_optim_name", None)
        world_size = options.pop("world_size", None)
        if algorithm is not None and lookup(algorithm) is not type(self):
            raise ValueError(f"{type(self).__name__} implements algorithm {self.name!r}, not {algorithm!r}")
        # a ZeRO optimizer wrapped by a method across its replicas (composition.py), else a torch optimizer
        self._inner: CommOptimizer | None = optimizer if isinstance(optimizer, CommOptimizer) else None
        if self._inner is not None:
            composition.check_nesting(type(self), self._inner)
        elif not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        _check_arguments(comm, model, buffers)
        self._init_optimizer_protocol()
        self.optimizer = optimizer
        if sdtl:
            options = {**SDTL_IMPLIED_OPTIONS.get(self.name, {}), **options}
        config = opts.merge(self.name, self.default_options(), options)
        config["codec"] = opts.codec(config["codec"])
        config["bucket_bytes"] = opts.optional_integer("bucket_bytes", config["bucket_bytes"], 1)
        self.options: dict[str, Any] = self._validate(config)
        self.mesh: pycomm.Mesh = self._resolve_mesh(comm, mesh)
        composition.check_mesh(type(self), self.options, self.mesh)
        self.comm = self.mesh["dp_replicate" if self._inner is not None else self.mesh_dim]
        if world_size is not None and world_size != self.comm.size:
            raise ValueError(
                f"world_size={world_size!r} (SDTL's argument) does not match the communicator's "
                f"{self.comm.size} ranks; drop it or start {world_size} ranks"
            )
        if self._inner is not None:  # the method runs on the replica's master shards (views of ZeRO's masters)
            self._inner.hand_replicas_over()
            self.params: list[torch.Tensor] = self._inner.master_params()
        else:
            self.params = [p for g in optimizer.param_groups for p in g["params"]]
            composition.claim(self.params, self)
        self.buffers: list[torch.Tensor] = list(model.buffers() if model is not None else (buffers or []))
        self.user_model: torch.nn.Module | None = model  # names the parameters in full_state_dict()
        device = self.params[0].device if self.params else torch.device("cpu")
        self.channel = Channel(self.comm, self.options["codec"], self.options["bucket_bytes"], device)
        self.steps = 0  # optimizer steps taken by this wrapper
        self._in_step = False
        self._broadcast_initial_state()
        self._setup()

    def _resolve_mesh(self, comm: Any, mesh: Any) -> pycomm.Mesh:
        """The Mesh the algorithm runs on: `mesh`, the wrapped ZeRO optimizer's, or the one `comm` (None:
        pycomm.world()) stands for (`_mesh_for`)."""
        if comm is not None and mesh is not None:
            raise TypeError(f"{self.name}: give comm= (a communicator) or mesh= (a pycomm.Mesh), not both")
        if mesh is not None and not isinstance(mesh, pycomm.Mesh):
            raise TypeError(f"mesh must be a pycomm.Mesh, got {type(mesh).__name__}")
        if self._inner is not None:
            if comm is not None or (mesh is not None and mesh is not self._inner.mesh):
                raise TypeError(
                    f"{self.name} over {self._inner.name}: it runs on the mesh of the ZeRO optimizer it "
                    "wraps; pass that mesh= or none, not another communicator"
                )
            return self._inner.mesh
        return mesh if mesh is not None else self._mesh_for(comm if comm is not None else pycomm.world())

    def _mesh_for(self, comm: pycomm.Communicator) -> pycomm.Mesh:
        """The Mesh a plain `comm=` stands for: all of its ranks along `mesh_dim` (a 1-D mesh)."""
        return pycomm.Mesh(comm)

    @property
    def torch_optimizer(self) -> torch.optim.Optimizer:
        """The torch optimizer at the bottom of the wrapping (the one given to the innermost algorithm)."""
        inner = self.optimizer
        return inner.torch_optimizer if isinstance(inner, CommOptimizer) else inner

    def _param_state(self, p: torch.Tensor) -> dict[str, Any]:
        """The optimizer state of one of `self.params` (a master shard's: ZeRO's shard optimizer's)."""
        source = self._inner.master_optimizer if self._inner is not None else self.optimizer
        return source.state[p]

    @classmethod
    def data_position(cls, rank: int, world: int, options: dict[str, Any]) -> tuple[int, int]:
        """(this rank's index among the ranks that train, how many train): which shard of the data it
        takes. Every rank trains, unless the algorithm gives some ranks another role (servers)."""
        return rank, world

    # -- options ------------------------------------------------------------------------------
    @classmethod
    def default_options(cls) -> dict[str, Any]:
        """{option: default} of this algorithm, the common options included."""
        return {**cls.common_options, **cls.algorithm_options}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        """Check and normalise the algorithm's own options (raise options.OptionError); `self.optimizer`
        is set, the communicator not yet."""
        return config

    # -- what subclasses implement ---------------------------------------------------------------
    def _setup(self) -> None:
        """Allocate the algorithm's state once the initial parameters are identical everywhere."""

    def _step(self, loss: float | None) -> None:
        raise NotImplementedError

    def _algorithm_state(self) -> dict[str, Any]:
        return {}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        pass

    @property
    def current_period(self) -> int:
        """Optimizer steps between communication rounds now (H for plsgd/qsr)."""
        return 1

    # -- torch.optim.Optimizer interface (param_groups, state, defaults: see OptimizerProtocol) ------
    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Any] | None = None, loss: Any = None) -> Any:
        """One training step: the closure (if any) computes the loss and gradients, then the wrapped
        optimizer steps and the algorithm communicates. Returns the loss (closure's or given)."""
        if closure is not None:
            with torch.enable_grad():
                closure_loss = closure()
            loss = closure_loss if loss is None else loss
        self._in_step = True
        try:
            self._step(None if loss is None else float(loss.detach() if torch.is_tensor(loss) else loss))
        finally:
            self._in_step = False
        self.steps += 1
        if self._inner is not None:  # the masters moved (ZeRO's step, then this rule): the model follows once
            self._inner.publish()
        return loss

    # -- gradient clipping ---------------------------------------------------------------------------
    @torch.no_grad()
    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach: bool | None = None
    ) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_ on the gradient this optimizer's step will apply, over the whole
        model: every rank's shard (ZeRO) and every pipeline stage; returns the total norm. Call it between
        backward and step, on every rank (a collective where the gradient is spread over ranks).

        Which gradient: a synchronous data-parallel method's (mbsgd, zero1/2/3, hybrid) is the mean over
        ranks, as DDP clips it; a method whose ranks step locally (plsgd, qsr, easgd, lsgd, diloco's inner
        steps) and a parameter-server or ssp worker clip the rank's own gradient, as torch's clip_grad_norm_
        on the model's parameters does there."""
        if self._inner is not None:  # a method across replicas over ZeRO: the gradient is ZeRO's shard
            return self._inner.clip_grad_norm_(max_norm, norm_type, error_if_nonfinite, foreach)
        return clipping.clip_grad_norm_(
            self._gradients_to_clip(),
            max_norm,
            norm_type,
            error_if_nonfinite,
            foreach,
            self._norm_comms(),
            self.channel.device,
        )

    def _gradients_to_clip(self) -> list[torch.Tensor]:
        """This rank's part of the gradient step() will apply, reduced where the method reduces it before
        the step (p.grad of this rank's parameters by default)."""
        return [p.grad for p in self.params if p.grad is not None]

    def _norm_comms(self) -> list[Any]:
        """The communicators over which `_gradients_to_clip` holds disjoint parts of the model's gradient:
        the pipeline's stages (a stage holds its layers)."""
        return [self.mesh["pp"]] if self.mesh.shape["pp"] > 1 else []

    # -- shared helpers ------------------------------------------------------------------------
    def comm_stats(self) -> dict[str, Any]:
        """Bytes and seconds communicated by this optimizer (see algorithms.channel), and calls;
        `bytes_by_dim`: the bytes per mesh dimension they travelled on (a wrapped ZeRO optimizer's
        included); `bytes_across_nodes`: those on dimensions whose group spans nodes (channel.bytes_across_nodes)."""
        stats = self._comm_counts()
        stats["bytes_across_nodes"] = bytes_across_nodes(self.mesh, stats["bytes_by_dim"])
        return stats

    def _comm_counts(self) -> dict[str, Any]:
        """comm_stats without what is derived from the counts (bytes_across_nodes)."""
        stats = self.channel.stats.as_dict()
        stats["bytes_by_dim"] = {"dp_replicate" if self._inner is not None else self.mesh_dim: stats["bytes"]}
        if self._inner is not None:
            inner = self._inner.comm_stats()
            stats["bytes"] += inner["bytes"]
            stats["seconds"] += inner["seconds"]
            for dim, n in inner["bytes_by_dim"].items():
                stats["bytes_by_dim"][dim] = stats["bytes_by_dim"].get(dim, 0) + n
        return stats

    def float_buffers(self) -> list[torch.Tensor]:
        return [b for b in self.buffers if b.is_floating_point()]

    @torch.no_grad()
    def average_buffers(self) -> None:
        """Average floating-point buffers (BatchNorm statistics) over ranks, e.g. before evaluation."""
        self.channel.allreduce(self.float_buffers(), key="buffers", compress=False)

    @torch.no_grad()
    def _broadcast_initial_state(self) -> None:
        if self._inner is not None:  # ZeRO broadcast the model over all of dp before it cut the masters
            return
        self.channel.broadcast([p.data for p in self.params] + self.buffers, root=0)

    def __getattr__(self, name: str) -> Any:
        # a method across replicas over a ZeRO optimizer offers what the ZeRO optimizer offers around the
        # step (no_sync, memory_bytes, the full model)
        inner = self.__dict__.get("_inner")
        if inner is not None and name in FROM_INNER:
            return getattr(inner, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @torch.no_grad()
    def _average_params(self, reference: list[torch.Tensor] | None, extra: list[torch.Tensor] = ()) -> None:
        """x <- mean_j x_j for the parameters (and `extra` tensors, never compressed). With a codec, the
        parameters travel as x - reference (reference identical on every rank), which compresses far
        better than x itself: x <- reference + mean_j (x_j - reference)."""
        params = [p.data for p in self.params]
        if self.channel.codec is None or reference is None:
            self.channel.allreduce(params + list(extra), key="params", compress=False)
            self._masters_changed()
            return
        extra_work = self.channel.allreduce_async(list(extra), compress=False)
        mean = self.channel.average_relative(params, reference, key="params")
        extra_work.wait()
        torch._foreach_copy_(params, mean)
        self._masters_changed()

    def _masters_changed(self) -> None:
        """Outside step() (e.g. average_now() before an evaluation), a method over ZeRO's masters makes
        the model follow them at once; inside, step() does it once at its end."""
        if self._inner is not None and not self._in_step:
            self._inner.publish()

    # -- checkpoints ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's state: the wrapped optimizer's, the algorithm's own (counters, centre variable,
        residuals, H), and which rank of which world size wrote it. Save one per rank."""
        return {
            "version": STATE_VERSION,
            "algorithm": self.name,
            "rank": self.comm.rank,
            "world_size": self.comm.size,
            "layout": self.state_layout,
            "mesh": {"shape": dict(self.mesh.shape), "coords": dict(self.mesh.coords)},
            "steps": self.steps,
            "optimizer": self.optimizer.state_dict(),
            "channel": self.channel.state_dict(),
            "algorithm_state": self._algorithm_state(),
        }

    def full_state_dict(self) -> dict[str, Any]:
        """{"model": the model's plain state dict, "optimizer": the torch optimizer's plain state dict}, on CPU,
        the same on every rank (call it on every rank: per-rank states are averaged over the ranks, see
        algorithms/full_state.py). Loads with load_full_state_dict on any number of ranks and into any
        method; its model part into a plain torch model (parameters named as in model=, else param<i>)."""
        if self._inner is not None:  # the replica's model, gathered from ZeRO's shards
            return self._inner.full_state_dict()
        from algorithms import full_state

        return full_state.full_state_dict(self)

    def load_full_state_dict(self, full: dict[str, Any], steps: int | None = None) -> None:
        """Load what full_state_dict() returned (any method's, written on any number of ranks); `steps` sets
        the step counter (None keeps it). The method's own state restarts from the loaded parameters."""
        if self._inner is None:
            from algorithms import full_state

            full_state.load_full_state_dict(self, full, steps)  # restarts the method's state too
            return
        self._inner.load_full_state_dict(full, steps)
        if steps is not None:
            self.steps = steps
        self._restart_from_parameters()

    def _restart_from_parameters(self) -> None:
        """After load_full_state_dict: the method's own state (centre, outer optimizer, counters) afresh from
        the parameters now loaded."""
        if self.setup_from_parameters:
            self._setup()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state_dict written by the same algorithm: on a world of the same size, or, when every
        rank's state is the same (state_layout identical: mbsgd), on any number of ranks; what is kept per
        rank even then (a codec's error-feedback residuals) starts afresh on another number of ranks."""
        state_checks.check_source(state, self.name)
        resized = state["world_size"] != self.comm.size
        if resized and self.state_layout != traits.IDENTICAL:
            raise ValueError(state_checks.resize_refusal(self, state["world_size"]))
        state_checks.check_owner(self, state)
        if self._inner is None:  # a wrapped ZeRO optimizer checks its own state
            state_checks.check_optimizer_shapes(state["optimizer"], self.params)
        self.optimizer.load_state_dict(state["optimizer"])
        self.channel.load_state_dict({**state["channel"], "residuals": {}} if resized else state["channel"])
        self.steps = state["steps"]
        self._load_algorithm_state(state["algorithm_state"])

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({type(self.optimizer).__name__}, {shown})"


def _check_arguments(comm: Any, model: Any, buffers: Any) -> None:
    if comm is not None and not isinstance(comm, pycomm.Communicator):
        raise TypeError(
            f"comm must be a pycomm.Communicator (pycomm.world(), comm.split(...)) or None for "
            f"pycomm.world(), got {type(comm).__name__}"
        )
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be the torch.nn.Module whose parameters the optimizer holds, got {type(model).__name__}"
        )
    if model is not None and buffers is not None:
        raise ValueError("pass model= or buffers=, not both")
    if buffers is not None:
        if isinstance(buffers, torch.Tensor) or not isinstance(buffers, Iterable):
            raise TypeError(f"buffers must be a list of tensors, got {type(buffers).__name__}")


def mark_stepped(optimizer: torch.optim.Optimizer) -> None:
    """Tell `optimizer`'s LR scheduler that a step took place where the optimizer itself did not step (a
    server steps it, or a shard optimizer does): torch's scheduler checks the flag its patched
    optimizer.step sets, and warns that the scheduler stepped first otherwise."""
    optimizer._opt_called = True  # type: ignore[attr-defined]


def clone_all(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone() for t in tensors]


def copy_into(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for d, s in zip(dst, src):
            d.copy_(s)
