"""Reading, layering, overriding, checking and printing configurations.

Layers, each over the previous: the embedded default, every YAML file in the order given (a file may
start from another with `base: other.yaml`, relative to it; deep-merged), then each `--override a.b=c`
(values parsed as YAML, so 3 is an int, 1e-3 a float, [1, 2] a list; a mapping replaces the key's
value). Switching `model.name`, `data.name` or `algorithm.name` drops the options held before the
switch that the new one does not take (with a note for those the user set), whether the algorithm is
built in or the user's (registered by `algorithm.module`, given before or after the name); options
set after the switch are checked against it. Values are checked against the field's type and range, then the whole
against the registries and the world size (apps.config.checks): every error before any rank starts.
Unknown keys get the closest valid key in the error."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import yaml

from apps.config import checks, research_code_keys, typed
from apps.config.schema import Config, ConfigError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"  # apps/configs


def _merge(base: dict, top: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_mapping(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not a text YAML file (byte {e.start} is not UTF-8); "
            "--config wants a YAML file such as apps/configs/default.yaml"
        ) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it: {e.strerror or e}") from e
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    return raw


def read_layers(path: str | Path, _seen: tuple[Path, ...] = ()) -> list[tuple[str, dict]]:
    """The file and its `base:` chain as (source, mapping) layers, the furthest base first."""
    path = Path(path)
    if not path.exists() and not path.is_absolute() and (CONFIG_DIR / path.name).exists() and path.parent == Path("."):
        path = CONFIG_DIR / path.name  # `--config resnet20.yaml` finds the shipped file
    if not path.exists():
        raise ConfigError(
            f"--config {str(path)!r}: no such file (shipped configs: "
            f"{', '.join(sorted(p.name for p in CONFIG_DIR.glob('*.yaml')))})"
        )
    if path.is_dir():
        raise ConfigError(f"--config {str(path)!r} is a directory; expected a YAML file")
    if path.resolve() in _seen:
        raise ConfigError(f"{path}: `base:` chain loops back to itself")
    raw = _read_mapping(path)
    base = raw.pop("base", None)
    if base is None:
        return [(str(path), raw)]
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: expected a file name, got {base!r}")
    return read_layers(path.parent / base, _seen + (path.resolve(),)) + [(str(path), raw)]


def _parse_override(assignment: str) -> tuple[list[str], Any]:
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
    return parts, value


def _set(raw: dict, parts: list[str], value: Any) -> None:
    node = raw
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


# Sections whose options belong to the chosen name: switching the name drops the options it lacks.
NAMED_SECTIONS = ("model", "data", "algorithm")


def _option_names(section: str, name: str) -> set[str] | None:
    """The options `name` takes in that section (epoch forms of *_steps included); None when the
    name is unknown (apps.config.checks then names it)."""
    if section == "algorithm":
        if name == "none":
            return set()
        import algorithms

        listing = algorithms.available()
        if name not in listing:
            return None
        return set(listing[name]) | {k[: -len("_steps")] + "_epochs" for k in listing[name] if k.endswith("_steps")}
    from apps.data import DATASETS
    from apps.models import MODELS

    registry = MODELS if section == "model" else DATASETS
    return set(registry.get(name).parameters()) if name in registry.names() else None


class _Layers:
    """The raw mapping built from the embedded default, then each file (its `base:` chain first),
    then each override, remembering which options the user set (for the notes)."""

    def __init__(self) -> None:
        defaults = to_dict(Config())
        self.raw: dict = {s: {"name": defaults[s]["name"], "options": defaults[s]["options"]} for s in NAMED_SECTIONS}
        self.user_options: dict[str, set[str]] = {s: set() for s in NAMED_SECTIONS}  # set by a file or override
        self.notes: list[str] = []
        # section -> (old name, new name, source, options held before the switch) for a switch to a name whose
        # options are not known yet: an algorithm of the user's, registered by algorithm.module, which may be
        # given after the name; resolved once every layer is in (result)
        self.pending: dict[str, tuple[Any, str, str, set[str]]] = {}

    def _switch(self, section: str, name: Any, source: str) -> None:
        current = self.raw.get(section)
        if not isinstance(current, dict) or not isinstance(name, str) or name == current.get("name"):
            return
        options = current.get("options")
        if not isinstance(options, dict):
            return
        self.pending.pop(section, None)  # superseded by this switch
        switch = (current.get("name"), name, source, set(options))
        valid = _option_names(section, name)
        if valid is None:
            self.pending[section] = switch
        else:
            self._drop(section, valid, *switch)

    def _drop(self, section: str, valid: set[str], old: Any, new: str, source: str, held: set[str]) -> None:
        """The options held before a switch that the new name does not take are dropped, the same for a
        built-in algorithm and one of the user's: with a note where the user set them (the embedded
        default's go quietly); options set after the switch stay (the algorithm's own check then names
        any it does not take)."""
        options = self.raw[section]["options"]
        dropped = sorted(k for k in held if k in options and k not in valid)
        self.raw[section]["options"] = {k: v for k, v in options.items() if k not in dropped}
        shown = [k for k in dropped if k in self.user_options[section]]
        if shown:
            self.notes.append(
                f"{source} switches {section}.name from {old!r} to {new!r}: dropped {section}.options "
                f"{', '.join(shown)} ({new!r} does not take them)"
            )

    def _set_after_switch(self, section: str, keys: set[str]) -> None:
        """The user set these options; after a pending switch they are the new algorithm's, not held over
        from the old one."""
        self.user_options[section] |= keys
        if section in self.pending:
            self.pending[section][3].difference_update(keys)

    def _resolve_pending(self) -> None:
        for section, switch in list(self.pending.items()):
            if section == "algorithm" and isinstance(self.raw["algorithm"].get("module"), str):
                from apps.config.schema import AlgorithmConfig
                from apps.optim import load_algorithm_module

                try:
                    load_algorithm_module(AlgorithmConfig(name=switch[1], module=self.raw["algorithm"]["module"]))
                except ValueError:
                    continue  # an unimportable module: apps.config.checks names it
            valid = _option_names(section, switch[1])
            if valid is not None and isinstance(self.raw[section].get("options"), dict):
                self._drop(section, valid, *switch)
        self.pending.clear()

    def add_file(self, source: str, raw: dict) -> None:
        raw, notes = research_code_keys.translate_mapping(raw, source)
        self.notes += notes
        for section in NAMED_SECTIONS:
            part = raw.get(section)
            if isinstance(part, dict):
                if "name" in part:
                    self._switch(section, part["name"], source)
                if isinstance(part.get("options"), dict):
                    self._set_after_switch(section, set(part["options"]))
        self.raw = _merge(self.raw, raw)

    def add_override(self, assignment: str) -> None:
        source = f"--override {assignment}"
        parts, value = _parse_override(assignment)
        parts, value, note = research_code_keys.translate(parts, source, value)
        if note:
            self.notes.append(note)
        section, rest = parts[0], parts[1:]
        if section in NAMED_SECTIONS:
            if rest == ["name"]:
                self._switch(section, value, source)
            elif rest == ["options"] and isinstance(value, dict):
                self._set_after_switch(section, set(value))
            elif len(rest) == 2 and rest[0] == "options":
                self._set_after_switch(section, {rest[1]})
        _set(self.raw, parts, value)

    def result(self) -> dict:
        self._resolve_pending()
        defaults = to_dict(Config())
        for section in NAMED_SECTIONS:  # a section replaced whole (-o 'algorithm={name: x}') has no options
            part = self.raw.get(section)
            if isinstance(part, dict) and "options" not in part:
                same = part.get("name") == defaults[section]["name"]
                part["options"] = defaults[section]["options"] if same else {}
        return self.raw


@dataclasses.dataclass
class Resolved:
    config: Config
    notes: list[str]  # what the user should know: keys renamed, options dropped, sizes derived


def resolve(
    paths: str | Path | Sequence[str | Path] | None = None,
    overrides: Iterable[str] = (),
    world_size: int | Callable[[Config], int] | None = None,
) -> Resolved:
    """The run's configuration: the embedded default, the YAML files layered left to right, then the
    overrides; checked as a whole for `world_size` ranks (None: as many as this launch will start; a
    function: the ranks this config runs on, e.g. apps.ps's workers plus the config's servers)."""
    if paths is None:
        paths = []
    elif isinstance(paths, (str, Path)):
        paths = [paths]
    layers = _Layers()
    for path in paths:
        for source, raw in read_layers(path):
            layers.add_file(source, raw)
    for assignment in overrides:
        layers.add_override(assignment)
    raw = layers.result()
    cfg = typed.build(Config, raw)
    if callable(world_size):
        world_size = world_size(cfg)
    notes = checks.check(cfg, world_size, batch_size_given="batch_size" in (raw.get("data") or {}))
    return Resolved(cfg, layers.notes + notes)


def load(
    paths: str | Path | Sequence[str | Path] | None = None, overrides: Iterable[str] = (), world_size: int | None = None
) -> Config:
    return resolve(paths, overrides, world_size).config


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=None)
