"""The local optimizer (SGD, AdamW, LARS) and its wrapping by a pycomm training algorithm."""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any, Iterator

import torch
from torch import nn

from apps.config.schema import AlgorithmConfig, OptimConfig, epochs_to_steps
from apps.name_registry import did_you_mean


def load_algorithm_module(cfg: AlgorithmConfig) -> None:
    """Import algorithm.module (which registers a user's algorithm), once; a clear error if it cannot be."""
    if cfg.module is None:
        return
    try:
        importlib.import_module(cfg.module)
    except ImportError as e:
        raise ValueError(
            f"algorithm.module: cannot import {cfg.module!r} ({e}); give an importable module "
            "(on PYTHONPATH) that registers the algorithm with @algorithms.register"
        ) from e


def algorithm_class(cfg: AlgorithmConfig) -> type | None:
    """The class registered for algorithm.name (None for "none", a bare torch optimizer)."""
    load_algorithm_module(cfg)
    return None if cfg.name == "none" else _algorithms().lookup(cfg.name)


def replicated(cfg: AlgorithmConfig) -> bool:
    """Whether every rank holds the same parameters and optimizer state after a step (then one copy of the
    state is saved), as the algorithm class declares (algorithms/traits.py)."""
    cls = algorithm_class(cfg)
    return cls is None or cls.state_layout == _algorithms().traits.IDENTICAL


def sharded(cfg: AlgorithmConfig) -> bool:
    """Whether each rank holds a shard of the parameters' optimizer state (ZeRO), as the class declares."""
    cls = algorithm_class(cfg)
    return cls is not None and cls.state_layout == _algorithms().traits.SHARDED


def owns_loop(cfg: AlgorithmConfig) -> bool:
    """Whether the algorithm trains in a loop of its own (opt.train(...): apps.own_loop drives it)."""
    cls = algorithm_class(cfg)
    return cls is not None and cls.training == _algorithms().traits.OWN_LOOP


def serves(cfg: AlgorithmConfig) -> bool:
    """Whether ranks take server or worker roles (a server rank runs opt.serve(): apps.server_loop)."""
    cls = algorithm_class(cfg)
    return cls is not None and cls.training == _algorithms().traits.SERVER


def server_ranks(cfg: AlgorithmConfig) -> int:
    """How many ranks serve (ranks 0 .. n-1; the `servers` option, the class's default), 0 without servers.
    A malformed value counts as 1 here: the algorithm itself refuses it, naming it."""
    if not serves(cfg):
        return 0
    value = {**getattr(algorithm_class(cfg), "algorithm_options", {}), **cfg.options}.get("servers", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def independent(cfg: AlgorithmConfig) -> bool:
    """Whether the ranks run as independent processes (fault tolerant: apps.launch.spawn_independent)."""
    cls = algorithm_class(cfg)
    return cls is not None and bool(getattr(cls, "independent_processes", False))


def data_position(cfg: AlgorithmConfig, rank: int, world: int) -> tuple[int, int]:
    """(index, count) of this rank among the ranks that take training data, as the class says."""
    cls = algorithm_class(cfg)
    return (rank, world) if cls is None else cls.data_position(rank, world, cfg.options)


def param_groups(model: nn.Module, weight_decay: float, exclude_bias_and_norm: bool) -> list[dict[str, Any]]:
    """Biases and normalisation weights (1-d tensors) get no weight decay (You et al. 2017)."""
    if not exclude_bias_and_norm:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]
    decay, plain = [], []
    for p in model.parameters():
        if p.requires_grad:
            (plain if p.ndim <= 1 else decay).append(p)
    return [
        g
        for g in ({"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0})
        if g["params"]
    ]


def build_optimizer(cfg: OptimConfig, model: nn.Module) -> torch.optim.Optimizer:
    groups = param_groups(model, cfg.weight_decay, cfg.exclude_bias_and_norm)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    import algorithms  # LARS is part of the algorithms package

    return algorithms.LARS(
        groups,
        lr=cfg.lr,
        momentum=cfg.momentum,
        trust_coefficient=cfg.trust_coefficient,
        exclude_bias_and_norm=cfg.exclude_bias_and_norm,
    )


def probe_optimizer(cfg: OptimConfig) -> torch.optim.Optimizer:
    """A throwaway optimizer of the configured kind over a 2x2 layer, for the config checks (torch's own checks
    of its arguments run; some algorithm checks read its type), built without importing torch._dynamo."""
    with _without_dynamo_import():
        return build_optimizer(cfg, nn.Linear(2, 2))


@contextlib.contextmanager
def _without_dynamo_import() -> Iterator[None]:
    """torch.optim.Optimizer.add_param_group is wrapped in torch._disable_dynamo, which imports torch._dynamo
    on its first call: 1.5-2 s of a 2-core machine, in the --nproc launcher (which never trains) before any
    rank starts. Until torch._dynamo is imported nothing can be compiling, so calling the wrapped function
    directly is what the wrapper would do; torch looks for it in the attribute set here. Anything
    unexpected (another torch) leaves torch's own path."""
    fn = getattr(torch.optim.Optimizer.add_param_group, "__wrapped__", None)
    if fn is None or "torch._dynamo" in sys.modules or hasattr(fn, "__dynamo_disable"):
        yield
        return
    setattr(fn, "__dynamo_disable", fn)
    try:
        yield
    finally:
        delattr(fn, "__dynamo_disable")  # later optimizers take torch's path: the import, then the real wrapper


def algorithm_options(cfg: AlgorithmConfig, steps_per_epoch: int, defaults: dict[str, Any]) -> dict[str, Any]:
    """Options in steps; `defaults` (total_steps, warmup_steps of the run) fill those the algorithm
    takes and the config does not set."""
    load_algorithm_module(cfg)
    options = epochs_to_steps(cfg.options, steps_per_epoch)
    valid = _valid_options(cfg.name)
    for key in options:
        if key not in valid:
            epochs = [k[: -len("_steps")] + "_epochs" for k in valid if k.endswith("_steps")]
            raise ValueError(
                f"unknown algorithm.options key '{key}' for '{cfg.name}'"
                f"{did_you_mean(key, [*valid, *epochs])}; valid: {', '.join(sorted(valid))}"
            )
    return {**{k: v for k, v in defaults.items() if k in valid}, **options}


def _algorithms() -> Any:
    import algorithms

    return algorithms


def _valid_options(name: str) -> set[str]:
    algorithms = _algorithms()
    listing = algorithms.available()
    if name not in listing:
        raise ValueError(
            f"algorithm.name: unknown algorithm '{name}'{did_you_mean(name, listing)}; "
            f"valid: none, {', '.join(sorted(listing))}"
        )
    return set(listing[name])


def wrap(
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    cfg: AlgorithmConfig,
    comm: Any,
    world_size: int,
    steps_per_epoch: int,
    defaults: dict[str, Any],
    mesh: Any = None,
) -> Any:
    """The training algorithm around the local optimizer (on `mesh` where given, else on `comm`); 'none'
    (one data-parallel rank only) leaves it bare."""
    if cfg.name == "none":
        if world_size > 1:
            raise ValueError(
                "algorithm.name=none trains one process; with several ranks choose an algorithm "
                "(e.g. mbsgd for synchronous data parallelism)"
            )
        if cfg.options:
            raise ValueError(f"algorithm.name=none takes no options, got {sorted(cfg.options)}")
        return optimizer
    options = algorithm_options(cfg, steps_per_epoch, defaults)
    place = {"comm": comm} if mesh is None else {"mesh": mesh}
    return _algorithms().CommOptimizer(optimizer, algorithm=cfg.name, model=model, **place, **options)
