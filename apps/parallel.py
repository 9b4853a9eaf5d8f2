"""apps.train's `parallel:` section: checked before any rank starts (`check_shape`, `check`), and built
at run time into a pycomm.Mesh, a Pipeline over the model's layers (`model.pipeline_layers()`) and the
optimizer-side methods on the mesh (`Layout`).

A section left at its defaults (pp = 1, dp_replicate = 1, no sharding) is the 1-D layout every run had
before: the algorithm gets `comm=` (so `hybrid=True` keeps cutting it by node). Otherwise the algorithm
gets `mesh=`: algorithm.name runs over mesh["dp"] (ZeRO: dp_shard, replicas over dp_replicate), and with
parallel.sharding a ZeRO stage runs inside dp_shard under algorithm.name across dp_replicate. Which
pairs compose is algorithms/composition.py's to say (docs/composition.md has the table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from apps.config.schema import AlgorithmConfig, Config, ConfigError, ParallelConfig


def trivial(p: ParallelConfig) -> bool:
    """The 1-D layout: no pipeline, no replicas apart from the data-parallel group, no sharding inside."""
    return p.pp == 1 and p.dp_replicate == 1 and p.sharding is None


def _shape(p: ParallelConfig, world: int) -> dict[str, int]:
    from pycomm.mesh import resolve_shape

    return resolve_shape(world, p.pp, p.dp_replicate, p.dp_shard)


# -- before launch ---------------------------------------------------------------------------------------
def check_shape(cfg: Config, world: int) -> int:
    """The parallel sizes against the launch's ranks; returns the data-parallel ranks (dp_replicate x
    dp_shard), the ranks that share the data."""
    if cfg.algorithm.name == "pipeline":
        raise ConfigError(
            "algorithm.name=pipeline: pipeline parallelism is the parallel section, not an algorithm: "
            "set parallel.pp=<stages> (with parallel.schedule, parallel.microbatches), and "
            "algorithm.name to the method on each stage's replicas (e.g. mbsgd, or zero2)"
        )
    try:
        shape = _shape(cfg.parallel, world)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"parallel: {str(e).replace('pycomm.Mesh: ', '')} (this launch runs {world} ranks: "
            f"--nproc or the launcher's)"
        ) from e
    return shape["dp_replicate"] * shape["dp_shard"]


def check(cfg: Config) -> list[str]:
    """What only the whole config can show: the pairs (algorithms/composition.py), the model's cut into
    stages, the batch's cut into micro-batches. Raises ConfigError; returns notes (settings derived)."""
    p = cfg.parallel
    if trivial(p):
        return []
    from algorithms import composition
    from apps import optim

    outer = optim.algorithm_class(cfg.algorithm)
    if outer is not None and optim.independent(cfg.algorithm):
        raise ConfigError(
            f"parallel: algorithm.name={cfg.algorithm.name} runs its ranks as independent processes "
            "without collectives, which cannot form a mesh; leave the parallel section at its defaults"
        )
    if cfg.algorithm.options.get("hybrid"):
        raise ConfigError(
            "algorithm.options.hybrid cuts the ranks by node; with a parallel section the mesh says "
            "where the replicas are (parallel.dp_replicate x parallel.dp_shard): drop hybrid"
        )
    try:
        if p.sharding is not None:
            _check_sharding(cfg, outer)
        if p.pp > 1 and outer is not None:
            composition.check_pipeline(outer, cfg.algorithm.options)
    except composition.CompositionError as e:
        raise ConfigError(f"parallel: {e}") from e
    return _check_pipeline(cfg) if p.pp > 1 else []


def _check_sharding(cfg: Config, outer: Optional[type]) -> None:
    from algorithms import composition, traits
    from algorithms.registry import lookup
    from apps.config import option_values

    p = cfg.parallel
    try:
        inner = lookup(p.sharding)
    except ValueError as e:
        raise ConfigError(f"parallel.sharding: {e}") from e
    if inner.state_layout != traits.SHARDED:
        raise ConfigError(
            f"parallel.sharding={p.sharding}: the method inside dp_shard must be a ZeRO stage (zero1, "
            f"zero2, zero3); put {p.sharding} in algorithm.name"
        )
    try:
        option_values.algorithm_option_values(p.sharding, p.sharding_options, cfg)
    except ValueError as e:
        raise ConfigError(f"parallel.sharding_options: {e}") from e
    if outer is not None:
        composition.check_nesting_classes(outer, inner, p.sharding_options)


def _check_pipeline(cfg: Config) -> list[str]:
    from algorithms.pipeline.partition import check_split
    from apps.models import MODELS
    from apps.models.parts import can_be_cut

    p, d, notes = cfg.parallel, cfg.data, []
    parts = p.pp * (p.chunks if p.schedule == "interleaved_1f1b" else 1)
    if not can_be_cut(_model_class(cfg.model.name)):
        cuttable = [n for n in MODELS.names() if can_be_cut(_model_class(n))]
        raise ConfigError(
            f"parallel.pp={p.pp}: model.name={cfg.model.name} cannot be cut into pipeline stages (it "
            f"offers no pipeline_layers()); use parallel.pp=1, or a model that can: "
            f"{', '.join(cuttable)}"
        )
    if "tie_weights" in MODELS.get(cfg.model.name).parameters():
        if cfg.model.options.get("tie_weights") is True:
            raise ConfigError(
                f"model.options.tie_weights=true with parallel.pp={p.pp}: the token embedding and the "
                "head sit on the first and the last stage; set tie_weights=false"
            )
        if "tie_weights" not in cfg.model.options:
            cfg.model.options["tie_weights"] = False
            notes.append(
                f"parallel.pp={p.pp}: model.options.tie_weights=false (the {cfg.model.name}'s head and token "
                "embedding sit on different stages, each with its own weight)"
            )
    model = _meta_model(cfg)
    layers = len(model.pipeline_layers()) if model is not None else None
    if layers is not None and layers < parts:
        raise ConfigError(
            f"parallel.pp={p.pp}: model.name={cfg.model.name} has {layers} layers to cut, fewer than the "
            f"{parts} pipeline parts; use fewer stages or a deeper model"
        )
    if layers is not None and p.split is not None:
        try:
            check_split(p.split, layers, parts)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"parallel.split: {str(e).replace('Pipeline: ', '')}") from e
    if p.schedule == "interleaved_1f1b" and p.microbatches % p.pp:
        raise ConfigError(
            f"parallel.microbatches={p.microbatches} must be a multiple of parallel.pp={p.pp} with "
            "parallel.schedule=interleaved_1f1b"
        )
    if d.physical_batch_size is not None:
        raise ConfigError(
            "data.physical_batch_size: with parallel.pp > 1 the pipeline cuts each batch into "
            "parallel.microbatches; leave physical_batch_size unset"
        )
    task = MODELS.get(cfg.model.name).meta["task"]
    if task not in LOSSES:
        raise ConfigError(
            f"parallel.pp={p.pp}: model.name={cfg.model.name} is a {task} model; pipeline stages train "
            f"classifiers and language models"
        )
    return notes


def check_batch(cfg: Config) -> None:
    """After the per-rank batch is known: it must cut into the pipeline's micro-batches."""
    p, d = cfg.parallel, cfg.data
    if p.pp > 1 and d.batch_size % p.microbatches:
        raise ConfigError(
            f"data.batch_size={d.batch_size} (per data-parallel rank) does not divide into "
            f"parallel.microbatches={p.microbatches}; choose a multiple of {p.microbatches}"
        )


def _model_class(name: str) -> Any:
    """What the model's registry entry builds (the class behind a functools.partial)."""
    from apps.models import MODELS

    factory = MODELS.get(name).factory
    return getattr(factory, "func", factory)


def _meta_model(cfg: Config) -> Any:
    """The configured model built on the meta device (no memory, no data), None if it cannot be built so."""
    from apps.models import MODELS

    try:
        with torch.device("meta"):
            return MODELS.build(cfg.model.name, cfg.model.options)
    except Exception:  # noqa: BLE001  (a model needing the data's sizes or an optional package: unknown here)
        return None


# -- at run time --------------------------------------------------------------------------------------------
def data_position(cfg: Config, rank: int, world: int) -> tuple[int, int]:
    """(index, count) of this rank's data shard: its place in the data-parallel group (the stages of a
    pipeline replica read the same batches)."""
    from apps import optim

    if trivial(cfg.parallel):
        return optim.data_position(cfg.algorithm, rank, world)
    from pycomm.mesh import coords_of

    shape = _shape(cfg.parallel, world)
    c = coords_of(rank, shape)
    return c["dp_replicate"] * shape["dp_shard"] + c["dp_shard"], shape["dp_replicate"] * shape["dp_shard"]


def _loss_classify(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits, y)


def _loss_lm(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())


LOSSES = {"classify": _loss_classify, "lm": _loss_lm}  # the last stage's loss per task (apps.tasks' losses)


@dataclass
class Layout:
    """The run's layout: `mesh` (None for the 1-D one), `pipe` (None without stages) and `module`, what this
    rank trains (the stage's layers, or the whole model)."""

    cfg: ParallelConfig
    mesh: Any
    pipe: Any
    module: nn.Module

    @classmethod
    def build(cls, cfg: Config, comm: Any, model: nn.Module) -> "Layout":
        p = cfg.parallel
        if trivial(p):
            return cls(p, None, None, model)
        import algorithms
        import pycomm

        mesh = pycomm.Mesh(comm, pp=p.pp, dp_replicate=p.dp_replicate, dp_shard=p.dp_shard)
        if p.pp == 1:
            return cls(p, mesh, None, model)
        pipe = algorithms.Pipeline(
            model.pipeline_layers(),
            mesh=mesh,
            schedule=p.schedule,
            microbatches=p.microbatches,
            split=p.split,
            chunks=p.chunks,
        )
        return cls(p, mesh, pipe, pipe.stage_module)

    def describe(self) -> str:
        """` as pp=2 x dp_replicate=1 x dp_shard=2 (zero3 inside dp_shard)`, or "" for the 1-D layout."""
        if self.mesh is None:
            return ""
        shape = " x ".join(f"{k}={v}" for k, v in self.mesh.shape.items())
        return f" as {shape}" + (f" ({self.cfg.sharding} inside dp_shard)" if self.cfg.sharding else "")

    @property
    def data_parallel(self) -> Optional[int]:
        return None if self.mesh is None else self.mesh["dp"].size

    def wrap(
        self,
        local_opt: torch.optim.Optimizer,
        algorithm: AlgorithmConfig,
        comm: Any,
        world: int,
        steps_per_epoch: int,
        defaults: dict[str, Any],
    ) -> Any:
        """The optimizer-side method(s) around the stage's (or model's) torch optimizer."""
        from apps import optim

        if self.mesh is None:
            return optim.wrap(local_opt, self.module, algorithm, comm, world, steps_per_epoch, defaults)
        opt: Any = local_opt
        if self.cfg.sharding is not None:
            inner = AlgorithmConfig(self.cfg.sharding, self.cfg.sharding_options)
            opt = optim.wrap(
                local_opt, self.module, inner, None, self.mesh["dp"].size, steps_per_epoch, defaults, mesh=self.mesh
            )
            if algorithm.name == "none":
                return opt
        return optim.wrap(
            opt, self.module, algorithm, None, self.mesh["dp"].size, steps_per_epoch, defaults, mesh=self.mesh
        )

    # -- a step -------------------------------------------------------------------------------------------
    def pipeline_step(
        self, batch: tuple[torch.Tensor, ...], kind: str, device_type: str, amp: Optional[torch.dtype]
    ) -> float:
        """Forward and backward of the batch through the stages; the batch's loss (mean over replicas)."""
        pipe = self.pipe
        x, y = batch
        with torch.autocast(device_type, dtype=amp or torch.float32, enabled=amp is not None):
            return pipe.train_step(
                x if pipe.is_first else None, y if pipe.is_last else None, LOSSES[kind] if pipe.is_last else None
            )

    def clip_grad_norm_(self, opt: Any, model: nn.Module, max_norm: float) -> torch.Tensor:
        """train.grad_clip: through the optimizer's own clip_grad_norm_, which every algorithm has (the norm
        of the whole model's gradient: ZeRO's shards and the pipeline's stages included; the averaged
        gradient for synchronous methods, the rank's own for local ones); for a plain torch optimizer
        (algorithm none) the pipeline's over its stages, else torch's. Returns the norm before clipping."""
        from algorithms import CommOptimizer

        if isinstance(opt, CommOptimizer):
            return opt.clip_grad_norm_(max_norm)
        if self.pipe is not None:
            return self.pipe.clip_grad_norm_(max_norm)
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    # -- the whole model on every rank (evaluation) ----------------------------------------------------
    @torch.no_grad()
    def share_stages(self, opt: Any, model: nn.Module) -> dict[int, torch.Tensor]:
        """Every rank's `model` takes the current values of every stage (collective over the mesh): the
        whole model, evaluated as one. Returns this rank's own stage's values by tensor identity
        (ZeRO-3's parameters are empty between steps: their values are these)."""
        own = self.own_values(opt)
        if self.pipe is None:
            return own
        layers = list(model.pipeline_layers().named_children())
        for s in range(self.pipe.stages):
            tensors = []
            for c in range(self.pipe.chunks):
                part = c * self.pipe.stages + s
                for _, layer in layers[self.pipe.bounds[part] : self.pipe.bounds[part + 1]]:
                    # the sender sends ZeRO's gathered values (by the live tensor's identity, before a detach
                    # makes a new one), in the model's dtypes: ZeRO-3's own parameters are empty here
                    tensors += [
                        own[id(t)].to(t.dtype) if s == self.pipe.stage and id(t) in own else t.detach()
                        for t in layer.state_dict(keep_vars=True).values()
                    ]
            self.pipe.pipeline_comm.broadcast_coalesced([t for t in tensors if t.numel()], root=s, async_op=True).wait()
        return own

    def own_values(self, opt: Any, gathered: Optional[dict[str, torch.Tensor]] = None) -> dict[int, torch.Tensor]:
        """This rank's stage (or model) values by tensor identity, gathered from ZeRO's shards when it has them
        (collective over dp_shard; `gathered`: a full state dict's model, already gathered)."""
        if gathered is None and not hasattr(opt, "full_model_state_dict"):
            return {}
        full = gathered if gathered is not None else opt.full_model_state_dict()
        mine = self.module.state_dict(keep_vars=True)
        return {id(mine[k]): v for k, v in full.items() if k in mine}
