"""Keys that users of the seed systems write, mapped to ours.

SmolCluster's GPT config (and its `--override training.batch_size=16`) puts the run's hyperparameters
under `training:` and `lr_schedule:`. Those keys are accepted as aliases of ours, each with a note
naming our key; any other key under those sections is an error suggesting the closest of our keys."""
from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

from apps.config import Config, ConfigError

# Seed section -> {seed key: our dotted key}.
ALIASES: dict[str, dict[str, str]] = {
    "training": {"batch_size": "data.batch_size", "epochs": "train.epochs", "learning_rate": "optim.lr",
                 "weight_decay": "optim.weight_decay", "grad_clip_norm": "train.grad_clip"},
    "lr_schedule": {"warmup_iters": "schedule.warmup_steps", "min_lr": "schedule.min_lr"},
}


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


def translate(parts: list[str], source: str) -> tuple[list[str], str | None]:
    """(our key path, note) for a seed key path; other paths unchanged with no note."""
    if not parts or parts[0] not in ALIASES:
        return parts, None
    section = ALIASES[parts[0]]
    seed_key = ".".join(parts)
    if len(parts) != 2 or parts[1] not in section:
        leaves = {k.rsplit(".", 1)[-1]: k for k in _our_keys()}  # the suggestion names our full key
        match = difflib.get_close_matches(parts[-1], list(leaves), n=1, cutoff=0.6)
        hint = f" (did you mean '{leaves[match[0]]}'?)" if match else ""
        raise ConfigError(f"{source}: unknown config key '{seed_key}'{hint}; '{parts[0]}.*' keys of "
                          f"SmolCluster that map to ours: "
                          f"{', '.join(f'{parts[0]}.{k} -> {v}' for k, v in section.items())}")
    ours = section[parts[1]]
    return ours.split("."), f"{source}: '{seed_key}' is SmolCluster's name for '{ours}'; using {ours}"


def translate_mapping(raw: dict, source: str) -> tuple[dict, list[str]]:
    """A YAML layer with seed sections rewritten to our keys, and the notes saying so."""
    if not any(section in raw for section in ALIASES):
        return raw, []
    out, notes = {k: v for k, v in raw.items() if k not in ALIASES}, []
    for section in ALIASES:
        values = raw.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: '{section}' expected a mapping, got {values!r}")
        for key, value in values.items():
            parts, note = translate([section, str(key)], source)
            node: dict[str, Any] = out
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
            notes.append(note)
    return out, notes
