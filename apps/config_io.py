"""Reading, overriding, checking and printing configurations.

A YAML file may start from another with `base: other.yaml` (relative to the file; deep-merged).
`--override a.b=c` values are parsed as YAML (so 3 is an int, 1e-3 a float, [1, 2] a list) and
checked against the field's type; unknown keys get the closest valid key in the error."""
from __future__ import annotations

import copy
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from apps.config import Config
from apps.registry import did_you_mean

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


class ConfigError(ValueError):
    pass


def _merge(base: dict, top: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    path = Path(path)
    if not path.exists() and not path.is_absolute() and (CONFIG_DIR / path.name).exists() and path.parent == Path("."):
        path = CONFIG_DIR / path.name  # `--config resnet20.yaml` finds the shipped file
    if not path.exists():
        raise ConfigError(f"--config {str(path)!r}: no such file (shipped configs: "
                          f"{', '.join(sorted(p.name for p in CONFIG_DIR.glob('*.yaml')))})")
    if path.resolve() in _seen:
        raise ConfigError(f"{path}: `base:` chain loops back to itself")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    base = raw.pop("base", None)
    if base is None:
        return raw
    return _merge(read_yaml(path.parent / base, _seen + (path.resolve(),)), raw)


def apply_override(raw: dict, assignment: str) -> None:
    """Set `a.b.c=value` in the raw mapping (creating levels), value parsed as YAML."""
    if "=" not in assignment:
        raise ConfigError(f"--override {assignment!r}: expected key=value, e.g. optim.lr=0.1")
    key, text = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--override {assignment!r}: empty key part in {key!r}")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"--override {assignment!r}: value is not valid YAML: {e}") from e
    node = raw
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0])
    if origin is typing.Literal:
        if value in args:
            return value
        raise ConfigError(f"{where}: {value!r} is not one of {list(args)}"
                          f"{did_you_mean(str(value), [str(a) for a in args])}")
    if origin is list:
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")


def _build(cls: type, raw: Any, where: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            prefix = f"{where}." if where else ""
            hint = did_you_mean(key, names).replace("'", f"'{prefix}", 1)
            raise ConfigError(f"unknown config key '{prefix}{key}'{hint}; valid keys here: {', '.join(names)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in raw.items()}
    return cls(**kwargs)


def check_names(cfg: Config) -> None:
    """Model and dataset names and their options exist (the algorithm is checked when it is built)."""
    from apps.data import DATASETS
    from apps.models import MODELS

    for registry, section in ((MODELS, cfg.model), (DATASETS, cfg.data)):
        if section.name not in registry.names():
            kind = "model" if registry is MODELS else "data"
            raise ConfigError(f"{kind}.name: unknown {registry.kind} '{section.name}'"
                              f"{did_you_mean(section.name, registry.names())}; valid: {', '.join(registry.names())}")
        where = "model.options" if registry is MODELS else "data.options"
        try:
            registry.check_options(section.name, section.options, where)
        except ValueError as e:
            raise ConfigError(str(e)) from e
    positive = {"data.batch_size": cfg.data.batch_size, "data.eval_batch_size": cfg.data.eval_batch_size,
                "train.log_every": cfg.train.log_every, "train.preempt_check_every": cfg.train.preempt_check_every,
                "launch.nproc": cfg.launch.nproc}
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{key} must be > 0, got {value}")
    if cfg.train.epochs <= 0 and not cfg.train.max_steps:
        raise ConfigError(f"train.epochs must be > 0 (or set train.max_steps), got {cfg.train.epochs}")
    if cfg.optim.lr <= 0:
        raise ConfigError(f"optim.lr must be > 0, got {cfg.optim.lr}")


def load(path: str | Path | None = None, overrides: Iterable[str] = ()) -> Config:
    """The run's configuration: the embedded default (or a YAML file) plus overrides, checked."""
    raw = read_yaml(path) if path else {}
    for assignment in overrides:
        apply_override(raw, assignment)
    cfg = _build(Config, raw, "")
    check_names(cfg)
    return cfg


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=None)
