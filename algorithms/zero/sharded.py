"""What ZeRO stages 1, 2 and 3 share (`ZeroOptimizer`): the flat groups and their fp32 master shards,
the shard optimizer, mixed precision, the step on the shard, global-norm clipping, byte counts and the
checkpoint methods. A stage decides how the parameters are grouped, how each group's gradient shard
is produced, and what happens to the parameters after the step (`_plan_groups`, `_gradient_shard`,
`_publish`).

Mixed precision: `param_dtype` (e.g. torch.bfloat16) is the dtype the model's parameters, and therefore
its gradients, are stored, computed and sent in; the masters and the optimizer state stay fp32 in the
shard. With `model=` the model's floating inputs are cast to it by a forward pre-hook; without, feed
inputs of that dtype. `reduce_dtype` (fp32 by default) is the dtype gradients are reduced in.

Placement (pycomm.Mesh): the flat groups are sharded over mesh["dp_shard"] and the shards replicated over
mesh["dp_replicate"], whose replicas average their gradient shards (hybrid sharding, HSDP). `comm=` is all
of it in dp_shard; with `hybrid=True` it is cut by node (pycomm.Mesh.across_nodes). An outer method that
wraps the ZeRO optimizer (plsgd across replicas, algorithms/composition.py) takes the replicas over:
`hand_replicas_over()`; it then runs on `master_params()` and calls `publish()`.

Gradient clipping: the gradients a ZeRO-2/3 rank keeps are its shard, which torch's
`clip_grad_norm_(model.parameters(), ...)` cannot see; call `opt.clip_grad_norm_(max_norm)` between
backward and step instead (the norm over all shards, and all pipeline stages, as torch computes it
unsharded). Until the step, each parameter's .grad is a marker (algorithms/grad_markers.py) on which
torch's clip raises an error naming opt.clip_grad_norm_, instead of returning 0."""

from __future__ import annotations

import copy
from typing import Any

import torch

import pycomm
from algorithms import grad_markers, traits
from algorithms import options as opts
from algorithms.base import CommOptimizer, mark_stepped
from algorithms.channel import codec_wire_bytes
from algorithms.zero import shard_optimizer
from algorithms.zero.flat_group import FlatGroup

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _dtype(name: str, value: Any, optional: bool) -> torch.dtype | None:
    if value is None and optional:
        return None
    if isinstance(value, str):
        value = getattr(torch, value.replace("torch.", ""), value)
    if value not in FLOAT_DTYPES:
        raise opts.OptionError(
            f"{name} must be {'None or ' if optional else ''}one of torch.float32, "
            f"torch.bfloat16, torch.float16, got {value!r}"
        )
    return value


class ZeroOptimizer(CommOptimizer):
    state_layout = traits.SHARDED
    # overlap_backward=False: gradient reductions start once backward has finished (same results, no overlap)
    algorithm_options: dict[str, Any] = {
        "param_dtype": None,
        "reduce_dtype": torch.float32,
        "hybrid": False,
        "overlap_backward": True,
    }

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        algorithm: str | None = None,
        comm: Any = None,
        *,
        model: torch.nn.Module | None = None,
        buffers: Any = None,
        **options: Any,
    ) -> None:
        self.model = model
        super().__init__(optimizer, algorithm, comm, model=model, buffers=buffers, **options)

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config["param_dtype"] = _dtype("param_dtype", config["param_dtype"], optional=True)
        config["reduce_dtype"] = _dtype("reduce_dtype", config["reduce_dtype"], optional=False)
        config["hybrid"] = opts.flag("hybrid", config["hybrid"])
        config["overlap_backward"] = opts.flag("overlap_backward", config["overlap_backward"])
        return config

    def _resolve_mesh(self, comm: Any, mesh: Any) -> pycomm.Mesh:
        if mesh is not None and self.options["hybrid"]:
            raise opts.OptionError(
                "hybrid=True cuts comm= by node; with mesh= the shards are replicated over the "
                "mesh's dp_replicate already: drop hybrid"
            )
        return super()._resolve_mesh(comm, mesh)

    def _mesh_for(self, comm: pycomm.Communicator) -> pycomm.Mesh:
        """comm= shards over all its ranks; with hybrid=True within each node, replicated across nodes."""
        return pycomm.Mesh.across_nodes(comm) if self.options["hybrid"] else pycomm.Mesh(comm)

    # -- setup ------------------------------------------------------------------------------------
    def _setup(self) -> None:
        self._check_model()
        self.shard_comm = self.mesh["dp_shard"]
        self.replica_comm = self.mesh["dp_replicate"] if self.mesh.shape["dp_replicate"] > 1 else None
        self._publish_deferred = False  # an outer method publishes after its own rule (hand_replicas_over)
        self.dim_bytes = {"dp_shard": 0, "dp_replicate": 0}  # what this rank handed to ZeRO's collectives
        values = {id(p): p.data for p in self.params}  # fp32 (or given) values the masters start from
        self._cast_parameters()
        self.groups = [
            FlatGroup(ps, self.shard_comm.size, self.shard_comm.rank, [values[id(p)] for p in ps])
            for ps in self._plan_groups()
        ]
        del values
        pieces = {id(p): g.shard_params[i] for g in self.groups for i, p in enumerate(g.params)}
        self.shard_optimizer = shard_optimizer.build(self.optimizer, pieces)
        self._grad_shards_cache: list[torch.Tensor] | None = None  # this step's, clipped in place
        self._after_setup()

    def _check_model(self) -> None:
        if self.model is None:
            return
        mine = {id(p) for p in self.model.parameters()}
        for index, p in enumerate(self.params):
            if id(p) not in mine:
                raise ValueError(
                    f"the optimizer's parameter {index} (shape {tuple(p.shape)}) is not a parameter of "
                    "model=: wrap the optimizer built over model.parameters()"
                )

    def _cast_parameters(self) -> None:
        dtype = self.options["param_dtype"]
        if dtype is None:
            return
        for p in self.params:
            if p.is_floating_point():
                p.data = p.data.to(dtype)
        if self.model is not None:
            self.model.register_forward_pre_hook(
                lambda _m, args, kwargs: _cast_inputs(args, kwargs, dtype), with_kwargs=True
            )

    def param_names(self) -> list[str]:
        """The parameters' names (the model's where model= was given, else param<i>), in optimizer order."""
        if self.model is None:
            return [f"param{i}" for i in range(len(self.params))]
        names = {id(p): n for n, p in self.model.named_parameters()}
        return [names[id(p)] for p in self.params]

    def param_shapes(self) -> list[torch.Size]:
        """The parameters' full shapes, in optimizer order (ZeRO-3 parameters are empty between uses)."""
        shape = {id(p): g.shapes[i] for g in self.groups for i, p in enumerate(g.params)}
        return [shape[id(p)] for p in self.params]

    # -- what a stage implements ------------------------------------------------------------------
    def _plan_groups(self) -> list[list[torch.Tensor]]:
        raise NotImplementedError

    def _after_setup(self) -> None:
        """Gradient hooks and the like, once the groups exist."""

    def _gradient_shard(self, index: int) -> torch.Tensor:
        """Group `index`'s fp32 gradient shard (shard-shaped), the gradients reduced over all ranks."""
        raise NotImplementedError

    def _synchronize(self) -> None:
        """Finish the gradient reduction (backward does it; here for gradients made outside it)."""

    def _publish(self) -> None:
        """After the masters changed: make the model's parameters (or their shards) follow."""
        raise NotImplementedError

    def _end_step(self) -> None:
        """Ready for the next backward."""

    # -- gradient reduction ---------------------------------------------------------------------
    def _wire(self, dtype: torch.dtype) -> torch.dtype | None:
        """wire_dtype for reducing gradients of `dtype` (None: their own, or a codec decides)."""
        reduce = self.options["reduce_dtype"]
        return None if reduce == dtype or self.options["codec"] is not None else reduce

    def _wire_bytes(self, numel: int, dtype: torch.dtype, wire: torch.dtype | None = None) -> int:
        """Bytes `numel` values of `dtype` take on the wire (as `wire`, or through the codec)."""
        if self.options["codec"] is not None and dtype.is_floating_point:
            return codec_wire_bytes(self.options["codec"], numel)
        return numel * (wire or dtype).itemsize

    def _count(self, dim: str, comm: Any, nbytes: int) -> None:
        """`nbytes` sent over `comm` (mesh dimension `dim`); a group of one rank sends nothing."""
        if comm.size > 1:
            self.dim_bytes[dim] = self.dim_bytes.get(dim, 0) + nbytes

    def _reduce_scatter(self, bucket: Any) -> Any:
        """A GradientBuckets bucket reduce-scattered over the shard's ranks into bucket.shard, then (hybrid)
        averaged over the replicas of the shard."""
        grads = bucket.grads()
        wire = self._wire(bucket.shard.dtype)
        self._count("dp_shard", self.shard_comm, sum(self._wire_bytes(g.numel(), g.dtype, wire) for g in grads))
        work = self.shard_comm.reduce_scatter_coalesced(
            bucket.shard,
            grads,
            op=pycomm.AVG,
            bucket_bytes=self.options["bucket_bytes"],
            wire_dtype=wire,
            codec=self.options["codec"],
            async_op=True,
        )
        # the full gradients are freed once packed: p.grad holds a marker until the step (grad_markers.py)
        return grad_markers.PlaceOnWait(self._across_replicas(work, bucket.shard), bucket.params, self.name)

    def _across_replicas(self, work: Any, shard: torch.Tensor) -> Any:
        """`work` (this replica's reduction of `shard`), then the shard averaged over the replicas of it
        (hybrid sharding); `work` itself when there are none (or an outer method takes them)."""
        if self.replica_comm is None:
            return work
        self._count("dp_replicate", self.replica_comm, shard.numel() * shard.element_size())
        return AcrossReplicas(work, self.replica_comm, shard)

    def _allgather_shard(self, full: list[torch.Tensor], shard: torch.Tensor) -> Any:
        """The parameters `full` all-gathered from every rank's `shard` over the shard group."""
        self._count("dp_shard", self.shard_comm, self._wire_bytes(shard.numel(), shard.dtype))
        return self.shard_comm.allgather_coalesced(
            full, shard, bucket_bytes=self.options["bucket_bytes"], codec=self.options["codec"], async_op=True
        )

    # -- composition: an outer method across the replicas (algorithms/composition.py) ----------------
    def hand_replicas_over(self) -> None:
        """An outer data-parallel method now runs across dp_replicate over `master_params()`: gradients are
        no longer averaged across replicas, and the model follows the masters only when it calls
        `publish()` (once per step, after its own rule)."""
        self.replica_comm = None
        self._publish_deferred = True

    def master_params(self) -> list[torch.Tensor]:
        """This rank's pieces of the fp32 masters (views; one per parameter and group, possibly empty)."""
        return [piece for g in self.groups for piece in g.shard_params]

    def master_origins(self) -> list[torch.Tensor]:
        """The parameter each of master_params() is a piece of, in the same order (to name the pieces)."""
        return [p for g in self.groups for p in g.params]

    @property
    def master_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer stepping the master pieces (its state is per piece)."""
        return self.shard_optimizer

    def publish(self) -> None:
        """Make the model's parameters (or their shards) follow the masters."""
        self._publish()

    def _comm_counts(self) -> dict[str, Any]:
        """The channel's counters (the initial broadcast over dp) plus every byte of ZeRO's reduce-scatters,
        all-reduces and all-gathers, per mesh dimension in `bytes_by_dim`."""
        stats = super()._comm_counts()
        stats["bytes"] += sum(self.dim_bytes.values())
        for dim, n in self.dim_bytes.items():
            stats["bytes_by_dim"][dim] = stats["bytes_by_dim"].get(dim, 0) + n
        return stats

    # -- the step ---------------------------------------------------------------------------------
    def _gradient_shards(self) -> list[torch.Tensor]:
        if self._grad_shards_cache is None:
            self._synchronize()
            self._grad_shards_cache = [self._gradient_shard(i) for i in range(len(self.groups))]
        return self._grad_shards_cache

    def _step(self, loss: float | None) -> None:
        shards = self._gradient_shards()
        for group, grad in zip(self.groups, shards):
            for i, piece in enumerate(group.shard_params):
                piece.grad = group.piece_of(grad, i)
        shard_optimizer.mirror(self.optimizer, self.shard_optimizer)
        self.shard_optimizer.step()
        mark_stepped(self.torch_optimizer)  # stepped through its shard
        for group in self.groups:
            for piece in group.shard_params:
                piece.grad = None
        grad_markers.clear(self.params)
        self._grad_shards_cache = None
        if not self._publish_deferred:
            self._publish()
        self._end_step()

    def _gradients_to_clip(self) -> list[torch.Tensor]:
        """The fp32 gradient shards step() applies (clipping scales them in place)."""
        return self._gradient_shards()

    def _norm_comms(self) -> list[Any]:
        """The shards are disjoint over dp_shard (and equal across replicas); a pipeline stage holds its layers."""
        return [self.shard_comm] + super()._norm_comms()

    def zero_grad(self, set_to_none: bool = True) -> None:
        grad_markers.clear(self.params)  # torch's zero_grad(set_to_none=False) would zero a marker
        super().zero_grad(set_to_none)
        self._grad_shards_cache = None

    # -- introspection ------------------------------------------------------------------------------
    def memory_bytes(self) -> dict[str, int]:
        """Bytes this rank holds now, counted from the live tensors (each storage once): the model's
        parameters, gradients (full ones and gradient shards) and optimizer state (masters included)."""
        from algorithms.zero.memory import count

        return count(self)

    def parameter_buffers(self) -> list[torch.Tensor]:
        """Parameter storage the stage keeps beside the model's (the parameter shards of ZeRO-3)."""
        return []

    def gradient_buffers(self) -> list[torch.Tensor]:
        """Gradient storage the stage keeps beside p.grad (the reduced shards of ZeRO-2/3)."""
        return []

    # -- checkpoints (algorithms/zero/sharded_state.py) -----------------------------------------------------
    def full_state_dict(self) -> dict[str, Any]:
        from algorithms.zero import sharded_state

        return sharded_state.full_state_dict(self)

    def full_model_state_dict(self) -> dict[str, Any]:
        """full_state_dict()["model"] without gathering the optimizer state (collective)."""
        from algorithms.zero import sharded_state

        return sharded_state.full_model_state_dict(self)

    def load_full_state_dict(self, full: dict[str, Any], steps: int | None = None) -> None:
        """Load what full_state_dict() returned, on any number of ranks; `steps` sets the step counter
        (which full_state_dict does not carry; None keeps it)."""
        from algorithms.zero import sharded_state

        shard = sharded_state.full_as_shard(self, full, self.steps if steps is None else steps)
        sharded_state.load_sharded(self, [shard])

    def sharded_state_dict(self) -> dict[str, Any]:
        from algorithms.zero import sharded_state

        return sharded_state.sharded_state_dict(self)

    def save_sharded_state_dict(self, directory: Any) -> None:
        from algorithms.zero import sharded_state

        sharded_state.save_sharded(self, directory)

    def load_sharded_state_dict(self, shards: Any) -> None:
        from algorithms.zero import sharded_state

        sharded_state.load_sharded(self, shards)

    def _algorithm_state(self) -> dict[str, Any]:
        return {
            "masters": [g.master.detach().clone() for g in self.groups],
            "shard_optimizer": copy.deepcopy(self.shard_optimizer.state_dict()),  # not the live tensors
            "dim_bytes": dict(self.dim_bytes),
        }

    @torch.no_grad()
    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        masters = state["masters"]
        if [m.numel() for m in masters] != [g.master.numel() for g in self.groups]:
            raise ValueError(
                "the saved master shards do not match this model's sharding: load a sharded state "
                "with load_sharded_state_dict to change the layout"
            )
        for g, m in zip(self.groups, masters):
            g.master.copy_(m)
        self.shard_optimizer.load_state_dict(state["shard_optimizer"])
        self.dim_bytes = dict(state.get("dim_bytes", self.dim_bytes))  # absent in states written before it
        self._publish()


class AcrossReplicas:
    """A node's reduce-scatter, then the shard averaged over the nodes holding the same shard."""

    def __init__(self, work: Any, replicas: Any, shard: torch.Tensor) -> None:
        self.work, self.replicas, self.shard = work, replicas, shard

    def wait(self) -> None:
        if self.work is None:
            return
        self.work.wait()
        self.work = None
        self.replicas.allreduce(self.shard, op=pycomm.AVG)


def _cast_inputs(args: tuple, kwargs: dict, dtype: torch.dtype) -> tuple[tuple, dict]:
    def cast(x: Any) -> Any:
        return x.to(dtype) if torch.is_tensor(x) and x.is_floating_point() else x

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


__all__ = ["ZeroOptimizer"]
