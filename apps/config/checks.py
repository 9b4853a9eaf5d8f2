"""Checks of a built configuration that no single field can make, run where the config is loaded,
before any rank starts (`--print-config` fails exactly when the run would): names and options
against the registries (model, data, algorithm, option values included), sizes that must divide
over the ranks, paths that must stay inside out_dir, and what a resume would silently ignore."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import yaml

from apps.config import option_values
from apps.config.schema import Config, ConfigError
from apps.name_registry import did_you_mean

RESUME_FIXED = ("optim", "schedule")  # restored from the checkpoint: a changed value would be ignored


def world_size_of_launch(cfg: Config) -> int:
    """The ranks this launch will run: launch.nproc when apps.train spawns them, else the launcher's."""
    from algorithms.ps.layout import from_env
    from apps import launch

    independent = from_env()  # a process of an independent launch (apps.launch, apps.ps) knows its world
    if independent is not None:
        return independent.world
    return cfg.launch.nproc if launch.should_spawn(cfg.launch.nproc) else launch.detect().size


def check(cfg: Config, world_size: int | None = None, batch_size_given: bool = True) -> list[str]:
    """Raise ConfigError on the first problem; derive data.batch_size from data.total_batch_size (in
    place). Returns notes for the user (sizes derived)."""
    from apps import parallel

    world = world_size_of_launch(cfg) if world_size is None else world_size
    _check_plain_names(cfg)
    _check_writable(cfg)
    _check_registries(cfg)
    data_parallel = parallel.check_shape(cfg, world)  # the ranks that share the data (all, without stages)
    _check_algorithm(cfg, data_parallel)
    notes = parallel.check(cfg)
    _check_length(cfg)
    _check_schedule(cfg)
    notes += _derive_batches(cfg, data_parallel, batch_size_given)
    parallel.check_batch(cfg)
    return notes


def _check_plain_names(cfg: Config) -> None:
    for key, value in (("name", cfg.name), ("checkpoint.prefix", cfg.checkpoint.prefix)):
        if value in ("", ".", "..") or "/" in value or os.sep in value or "\0" in value:
            raise ConfigError(
                f"{key} must be a plain file name (it names a directory under out_dir), got {value!r}; "
                "set out_dir to choose where runs go"
            )


def _check_writable(cfg: Config) -> None:
    """out_dir and checkpoint.directory must be creatable directories this user can write, checked before
    any rank starts (a rank failing at its first save would otherwise end the job mid-run)."""
    for key, value in (("out_dir", cfg.out_dir), ("checkpoint.directory", cfg.checkpoint.directory)):
        if value is None:
            continue
        path = Path(value).absolute()
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise ConfigError(f"{key}={value!r}: {existing} is a file, not a directory; choose a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(f"{key}={value!r}: {existing} is not writable by this user; choose a writable directory")


def _check_registries(cfg: Config) -> None:
    from apps.data import DATASETS
    from apps.models import MODELS

    for registry, section, kind in ((MODELS, cfg.model, "model"), (DATASETS, cfg.data, "data")):
        if section.name not in registry.names():
            raise ConfigError(
                f"{kind}.name: unknown {registry.kind} '{section.name}'"
                f"{did_you_mean(section.name, registry.names())}; valid: {', '.join(registry.names())}"
            )
        try:
            registry.check_options(section.name, section.options, f"{kind}.options")
        except ValueError as e:
            raise ConfigError(str(e)) from e
    _check_data_path_given(cfg)
    _check_block_size(cfg)


def _check_block_size(cfg: Config) -> None:
    """A model whose context (model.options.block_size) is shorter than the data's windows would refuse
    every batch on the ranks."""
    from apps.data import DATASETS
    from apps.models import MODELS

    model = cfg.model.options.get("block_size")
    data = {**DATASETS.defaults(cfg.data.name), **cfg.data.options}.get("block_size")
    if (
        "block_size" in MODELS.get(cfg.model.name).parameters()
        and isinstance(model, int)
        and isinstance(data, int)
        and model < data
    ):
        raise ConfigError(
            f"model.options.block_size={model} is shorter than the data's windows "
            f"(data.options.block_size={data}); set model.options.block_size >= {data}, or leave it "
            "unset (the model then takes the data's)"
        )


def _check_data_path_given(cfg: Config) -> None:
    """A dataset that cannot load without data.path (text, cifar10, imagefolder) refuses an unset one here,
    with the dataset's own message, so that `--print-config` fails as the run would. Whether the files
    are there is check_data_files' (at launch)."""
    from apps.data import DATASETS, check_source

    if "path" in cfg.data.options:  # one place for it: a path in both would leave which one wins unsaid
        raise ConfigError(
            f"data.options.path={cfg.data.options['path']!r}: a dataset's files are named by data.path "
            "(-o data.path=...), not by data.options"
        )
    path = DATASETS.get(cfg.data.name).parameters().get("path")
    if cfg.data.path is None and path is not None and path.default is path.empty:
        try:
            check_source(cfg.data.name, {**cfg.data.options, "path": None})
        except (OSError, ValueError) as e:
            raise ConfigError(f"data: {e}") from e
        raise ConfigError(f"data.path: data.name={cfg.data.name} needs a path, got none")


def check_data_files(cfg: Config) -> None:
    """The dataset's files are where data.path says, checked right before launch (a missing file found by
    every rank after launch was 55 interleaved lines of tracebacks). Not part of check(): a config can be
    printed or checked where its data is not."""
    from apps.data import check_source

    options = {**cfg.data.options, **({"path": cfg.data.path} if cfg.data.path is not None else {})}
    try:
        check_source(cfg.data.name, options)
    except (OSError, ValueError) as e:
        raise ConfigError(f"data: {e}") from e


def _check_algorithm(cfg: Config, world: int) -> None:
    from apps import optim
    from apps.models import MODELS

    name = cfg.algorithm.name
    if name == "none":
        if world > 1:
            raise ConfigError(
                f"algorithm.name=none trains one process, but this launch runs {world} ranks; choose an "
                "algorithm (e.g. mbsgd for synchronous data parallelism) or --nproc 1"
            )
        if cfg.algorithm.options:
            raise ConfigError(f"algorithm.name=none takes no options, got {sorted(cfg.algorithm.options)}")
        return
    try:
        options = optim.algorithm_options(cfg.algorithm, 1, {})  # names (and the algorithm) exist
        _check_fragments(option_values.algorithm_option_values(name, options, cfg), cfg)
    except ValueError as e:
        raise ConfigError(
            f"algorithm.options: {e}" if not str(e).startswith(("algorithm", "unknown")) else str(e)
        ) from e
    servers = optim.server_ranks(cfg.algorithm)
    if servers and servers >= world:
        raise ConfigError(
            f"algorithm.options.servers={servers} leaves no worker among the {world} ranks of this "
            f"launch (ranks 0..{servers - 1} serve); start more ranks (--nproc {servers + 1} or more) "
            "or use fewer servers"
        )
    task = MODELS.get(cfg.model.name).meta["task"]
    if optim.owns_loop(cfg.algorithm) and task not in ("classify", "lm"):
        raise ConfigError(
            f"algorithm.name={name} needs a model with targets (classification or language model); "
            f"model.name={cfg.model.name} is a {task} model"
        )


def _check_fragments(options: dict[str, Any], cfg: Config) -> None:
    """Streaming DiLoCo's `fragments` are strided over the model's layers: no more of them than layers. The
    model is built on the meta device (no memory, no initialisation) to count them; a pipeline stage's
    layers are the ranks' to count."""
    import torch

    from algorithms import fragments
    from apps.models import MODELS

    wanted = options.get("fragments", 1)
    if not isinstance(wanted, int) or wanted <= 1 or cfg.parallel.pp > 1:
        return
    try:
        with torch.device("meta"):
            model = MODELS.build(cfg.model.name, cfg.model.options)
    except (ImportError, RuntimeError, TypeError, ValueError):
        return  # a model that needs its data (or a package) to be built: the ranks count its layers
    count = len(fragments.layers(list(model.parameters()), model))
    if wanted > count:
        raise ValueError(
            f"fragments={wanted} is more than the {count} layers of model.name={cfg.model.name} "
            f"(algorithms/fragments.py says what a layer is); choose fragments <= {count}"
        )


def _check_length(cfg: Config) -> None:
    t, s = cfg.train, cfg.schedule
    if t.epochs <= 0 and t.max_steps is None:
        raise ConfigError(f"train.epochs must be > 0 (or set train.max_steps), got {t.epochs}")
    warmup = s.warmup_steps if s.warmup_steps is not None else s.warmup_epochs
    if warmup and s.name != "cosine":
        raise ConfigError(f"schedule.warmup_* is supported with schedule.name=cosine, not {s.name!r}")
    if s.milestones != sorted(s.milestones):
        raise ConfigError(f"schedule.milestones must be increasing, got {s.milestones}")


def _check_schedule(cfg: Config) -> None:
    s, lr = cfg.schedule, cfg.optim.lr
    if s.name == "cosine" and s.min_lr > lr:
        raise ConfigError(
            f"schedule.min_lr={s.min_lr:g} is above optim.lr={lr:g}: the cosine schedule would climb "
            f"from optim.lr to it instead of decaying; set schedule.min_lr <= {lr:g}"
        )


def _derive_batches(cfg: Config, world: int, batch_size_given: bool) -> list[str]:
    d, notes = cfg.data, []
    if d.total_batch_size is not None:
        if d.total_batch_size % world:
            raise ConfigError(
                f"data.total_batch_size={d.total_batch_size} is not divisible by the {world} ranks of "
                f"this launch; choose a multiple of {world}"
            )
        per_rank = d.total_batch_size // world
        if batch_size_given and d.batch_size != per_rank:
            raise ConfigError(
                f"data.batch_size={d.batch_size} (per rank) and data.total_batch_size="
                f"{d.total_batch_size} disagree on {world} ranks ({d.total_batch_size} / {world} = "
                f"{per_rank}); set only one of them"
            )
        d.batch_size = per_rank
    if d.physical_batch_size is not None and d.physical_batch_size != d.batch_size:
        if d.physical_batch_size > d.batch_size or d.batch_size % d.physical_batch_size:
            raise ConfigError(
                f"data.physical_batch_size={d.physical_batch_size} must divide the per-rank batch "
                f"data.batch_size={d.batch_size} (gradients are accumulated over "
                f"batch_size / physical_batch_size micro-batches)"
            )
        if _owns_loop(cfg.algorithm):
            raise ConfigError(
                f"data.physical_batch_size: {cfg.algorithm.name} trains in its own worker processes "
                "and does not accumulate gradients; leave it unset"
            )
        notes.append(
            f"gradient accumulation: {d.batch_size // d.physical_batch_size} micro-batches of "
            f"{d.physical_batch_size} per step (data.batch_size={d.batch_size} per rank, {world} rank(s))"
        )
    return notes


def _owns_loop(algorithm: Any) -> bool:
    from apps import optim

    return optim.owns_loop(algorithm)


def check_resume(cfg: Config, resume: str) -> None:
    """Refuse to resume another algorithm's checkpoint (naming it), or with optim.* / schedule.* values
    other than those the checkpointed run used: the checkpoint restores the optimizer's and the
    schedule's state, so the new values would be ignored while config.yaml recorded them. Compared
    against <out_dir>/<name>/config.yaml."""
    from algorithms import checkpointing
    from apps import checkpoint

    run_dir = Path(cfg.out_dir) / cfg.name
    ckpt_dir = cfg.checkpoint.directory_in(run_dir)
    recorded_file = run_dir / "config.yaml"
    try:
        found = checkpoint.resolve(resume, ckpt_dir, cfg.checkpoint.prefix)
    except checkpoint.CheckpointError:
        return  # a missing --resume PATH is reported by the restore itself
    if found is None:
        return
    try:
        ckpt = checkpointing.read_manifest(found)
    except checkpoint.CheckpointError:
        ckpt = None  # an incomplete or damaged checkpoint is reported by the restore itself
    if ckpt is not None:
        try:
            checkpoint.check_algorithm(ckpt, cfg.algorithm.name)
        except checkpoint.CheckpointError as e:
            raise ConfigError(f"--resume: {e}") from None
    if not recorded_file.is_file():
        return
    try:
        recorded = yaml.safe_load(recorded_file.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return  # not ours to judge: the checkpoint's own checks apply
    now = dataclasses.asdict(cfg)
    for section in RESUME_FIXED:
        before = recorded.get(section) or {}
        for key, value in now[section].items():
            if key in before and not _same(before[key], value):
                raise ConfigError(
                    f"--resume: {section}.{key} is {value!r} here but {before[key]!r} in the run being "
                    f"resumed ({recorded_file}); the checkpoint restores the optimizer's and the "
                    f"schedule's state, so the new value would be ignored. Resume with "
                    f"{section}.{key}={before[key]!r}, or start a new run (another name)"
                )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
