"""Config keys of the research codes pycomm replaces (docs/algorithms.md lists them), mapped to ours, so
a config written for one of them runs here.

SmolCluster's GPT config (and its `--override training.batch_size=16`) puts the run's hyperparameters
under `training:` and `lr_schedule:`. maxie's training script (its test_config_training.yaml) writes
`dist:`, `lr_scheduler:` and `checkpoint.chkpt_saving_iterations`. Those keys are accepted as aliases of
ours, each with a note naming our key; any other key under those sections is an error suggesting the
closest of our keys. Some of maxie's keys map by value (VALUE_MAPS):
  dist.sharding_stage  zero0 -> algorithm mbsgd (DDP); zero2/zero3 -> algorithm zero2/zero3;
                       zero2_hybrid/zero3_hybrid -> the same with algorithm.options.hybrid=true
  dist.dtype           -> train.dtype (bf16 autocast, fp32 parameters), for every stage; ZeRO's bf16
                       parameters on the wire are algorithm.options.param_dtype=bfloat16, set apart
  dist.cpu_only        true -> train.device=cpu, false -> auto"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Callable

from apps.config.schema import Config, ConfigError

# Their section -> {their key: our dotted key}.
ALIASES: dict[str, dict[str, str]] = {
    "training": {
        "batch_size": "data.batch_size",
        "epochs": "train.epochs",
        "learning_rate": "optim.lr",
        "weight_decay": "optim.weight_decay",
        "grad_clip_norm": "train.grad_clip",
    },
    "lr_schedule": {"warmup_iters": "schedule.warmup_steps", "min_lr": "schedule.min_lr"},
    "lr_scheduler": {"warmup_iterations": "schedule.warmup_steps", "total_iterations": "schedule.total_steps"},
    "dist": {
        "sharding_stage": "algorithm",
        "dtype": "train.dtype",
        "cpu_only": "train.device",
        "backend": "launch.backend",
    },
}
# Keys of our own sections that maxie names otherwise.
RENAMED: dict[str, dict[str, str]] = {"checkpoint": {"chkpt_saving_iterations": "checkpoint.every_steps"}}
STAGES = {
    "zero0": ("mbsgd", {}),
    "zero1": ("zero1", {}),
    "zero2": ("zero2", {}),
    "zero3": ("zero3", {}),
    "zero2_hybrid": ("zero2", {"hybrid": True}),
    "zero3_hybrid": ("zero3", {"hybrid": True}),
}


def _stage(value: Any) -> Any:
    if value not in STAGES:
        raise ConfigError(f"dist.sharding_stage: expected one of {', '.join(STAGES)}, got {value!r}")
    name, options = STAGES[value]
    return {"name": name, "options": dict(options)}


def _cpu_only(value: Any) -> str:
    if not isinstance(value, bool):
        raise ConfigError(f"dist.cpu_only: expected true or false, got {value!r}")
    return "cpu" if value else "auto"


VALUE_MAPS: dict[str, Callable[[Any], Any]] = {"dist.sharding_stage": _stage, "dist.cpu_only": _cpu_only}


def _our_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Every dotted leaf key of the configuration (train.epochs, optim.lr, ...)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys += _our_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def translate(parts: list[str], source: str, value: Any = None) -> tuple[list[str], Any, str | None]:
    """(our key path, value, note) for a research code's key path and its value; other paths unchanged,
    no note."""
    their_key = ".".join(parts)
    if len(parts) == 2 and parts[1] in RENAMED.get(parts[0], {}):
        ours = RENAMED[parts[0]][parts[1]]
        return ours.split("."), value, f"{source}: '{their_key}' is maxie's name for '{ours}'; using {ours}"
    if not parts or parts[0] not in ALIASES:
        return parts, value, None
    section = ALIASES[parts[0]]
    who = "SmolCluster" if parts[0] in ("training", "lr_schedule") else "maxie"
    if len(parts) != 2 or parts[1] not in section:
        leaves = {k.rsplit(".", 1)[-1]: k for k in _our_keys()}  # the suggestion names our full key
        match = difflib.get_close_matches(parts[-1], list(leaves), n=1, cutoff=0.6)
        hint = f" (did you mean '{leaves[match[0]]}'?)" if match else ""
        raise ConfigError(
            f"{source}: unknown config key '{their_key}'{hint}; '{parts[0]}.*' keys of "
            f"{who} that map to ours: {', '.join(f'{parts[0]}.{k} -> {v}' for k, v in section.items())}"
        )
    ours = section[parts[1]]
    value = VALUE_MAPS.get(their_key, lambda v: v)(value)
    shown = f"{ours}={value}" if their_key in VALUE_MAPS else ours
    return ours.split("."), value, f"{source}: '{their_key}' is {who}'s name for '{ours}'; using {shown}"


def translate_mapping(raw: dict, source: str) -> tuple[dict, list[str]]:
    """A YAML layer with a research code's sections (and renamed keys) rewritten to our keys, and the notes
    saying so."""
    renamed = [(s, k) for s, keys in RENAMED.items() if isinstance(raw.get(s), dict) for k in keys if k in raw[s]]
    if not any(section in raw for section in ALIASES) and not renamed:
        return raw, []
    out, notes = {k: v for k, v in raw.items() if k not in ALIASES}, []
    items: list[tuple[str, str, Any]] = []
    for section, key in renamed:
        out[section] = {k: v for k, v in out[section].items() if k != key}
        items.append((section, key, raw[section][key]))
    for section in ALIASES:
        values = raw.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: '{section}' expected a mapping, got {values!r}")
        items += [(section, str(k), v) for k, v in values.items()]
    for section, key, value in items:
        parts, value, note = translate([section, key], source, value)
        node: dict[str, Any] = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        notes.append(note)
    return out, notes
