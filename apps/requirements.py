"""Optional packages a config needs (pyproject.toml's extras), checked before any rank starts, with the
exact install line for what is missing: a run must not fail after MPI started, or after training, on
a missing wandb or matplotlib. Plots are a by-product, so a missing matplotlib only warns."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from apps.config.schema import ConfigError

# The PyPI "pycomm" is an unrelated project: extras are named for a checkout install, `pip install '.[x]'`.
CHECKOUT_EXTRA = "pip install '.[{extra}]' in the pycomm checkout"
CPU_WHEELS = "https://download.pytorch.org/whl/cpu"


class MissingDependencyError(ImportError, ConfigError):
    """A config this installation cannot run: an optional package is missing or does not fit torch.
    An ImportError (what the import would have raised) and a ConfigError (raised while checking one)."""


@dataclass(frozen=True)
class Dependency:
    module: str  # import name
    package: str  # pip name
    extra: str  # pyproject.toml's extra that provides it

    def install_line(self) -> str:
        return f"pip install {self.package} (or {CHECKOUT_EXTRA.format(extra=self.extra)})"

    def problem(self) -> str | None:
        """Why it cannot be used here, or None. Presence only: importing would cost seconds per rank."""
        return None if importlib.util.find_spec(self.module) is not None else "is not installed"


def torch_version() -> str:
    return importlib.metadata.version("torch")


def torchvision_for(torch: str) -> str:
    """The torchvision release built for torch 2.m.p: 0.(m+15).p (the pairing since torch 2.0)."""
    major, minor, patch = (int(x) for x in re.match(r"(\d+)\.(\d+)\.(\d+)", torch).groups())
    if major != 2:
        raise ValueError(f"torch {torch}: no known torchvision pairing (expected torch 2.x)")
    return f"0.{minor + 15}.{patch}"


def torch_required_by(requires: list[str]) -> str | None:
    """The torch==X.Y.Z a distribution's Requires-Dist pins, if any ("torch (==2.13.0)" or "torch==2.13.0")."""
    for req in requires:
        m = re.match(r"torch\s*\(?\s*==\s*([0-9][\w.]*)", req)
        if m:
            return m.group(1)
    return None


class TorchVision(Dependency):
    """torchvision must be the release built for the installed torch: an unpinned `pip install
    torchvision` pulls the newest one, and with it a different torch."""

    def install_line(self) -> str:
        torch = torch_version()
        index = f" --index-url {CPU_WHEELS}" if torch.endswith("+cpu") else ""
        return f"pip install torchvision=={torchvision_for(torch)}{index} (the release built for torch {torch})"

    def problem(self) -> str | None:
        missing = super().problem()
        if missing:
            return missing
        try:
            wanted = torch_required_by(importlib.metadata.requires("torchvision") or [])
            have = importlib.metadata.version("torchvision")
        except importlib.metadata.PackageNotFoundError:
            return None  # a source build without metadata: nothing to compare
        torch = torch_version().split("+")[0]
        if wanted is not None and wanted != torch:
            return f"is version {have}, built for torch {wanted}, not the installed torch {torch}"
        return None


MATPLOTLIB = Dependency("matplotlib", "matplotlib", "plots")
TENSORBOARD = Dependency("tensorboard", "tensorboard", "tensorboard")
WANDB = Dependency("wandb", "wandb", "wandb")
TRANSFORMERS = Dependency("transformers", "transformers", "hf")
TORCHVISION = TorchVision("torchvision", "torchvision", "vision")
FASTAPI = Dependency("fastapi", "fastapi", "serve")
UVICORN = Dependency("uvicorn", "uvicorn", "serve")
SERVE = (FASTAPI, UVICORN)  # python -m apps.serve (checked by serve_problems before any rank starts)
PYZMQ = Dependency("zmq", "pyzmq", "ps")
DEPENDENCIES = (MATPLOTLIB, TENSORBOARD, WANDB, TRANSFORMERS, TORCHVISION, *SERVE, PYZMQ)


def _independent_processes(name: Any) -> bool:
    """Whether the algorithm runs as independent processes over ZeroMQ (its class declares it)."""
    import algorithms

    try:
        return bool(getattr(algorithms.lookup(name), "independent_processes", False))
    except (TypeError, ValueError):
        return False  # an unknown name is reported by the config checks


@dataclass(frozen=True)
class Need:
    key: str  # the config key that asks for the package
    applies: Callable[[Any], bool]  # of the key's value
    dependency: Dependency
    instead: str  # how to do without it
    fatal: bool = True  # False: the run goes on without what it gives (a warning)


NEEDS = (
    Need("logging.tensorboard", bool, TENSORBOARD, "set logging.tensorboard=false"),
    Need("logging.wandb", lambda v: v != "disabled", WANDB, "set logging.wandb=disabled"),
    Need("model.name", lambda v: v == "vit_mae", TRANSFORMERS, "choose another model"),
    Need("data.name", lambda v: v == "imagefolder", TORCHVISION, "choose another data.name"),
    Need("logging.plot", bool, MATPLOTLIB, "set logging.plot=false", fatal=False),
    Need("algorithm.name", _independent_processes, PYZMQ, "choose an algorithm that runs as one MPI job"),
)


def _value(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def setting(key: str, value: Any) -> str:
    """key=value as it is written in a config or an override (true, not True)."""
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


def explain(why: str, dependency: Dependency, problem: str, instead: str) -> str:
    return f"{why} needs {dependency.module}, which {problem}: {dependency.install_line()}; or {instead}"


def problems(cfg: Any) -> tuple[list[str], list[str]]:
    """(errors, warnings) for what `cfg` needs and this installation lacks."""
    errors, warnings = [], []
    for need in NEEDS:
        value = _value(cfg, need.key)
        if not need.applies(value):
            continue
        problem = need.dependency.problem()
        if problem:
            text = explain(setting(need.key, value), need.dependency, problem, need.instead)
            (errors if need.fatal else warnings).append(text)
    return errors, warnings


def check(cfg: Any) -> None:
    """Before any rank starts: raise MissingDependencyError naming every missing package and its
    install line; print a warning for what the run can do without (once, from the first process)."""
    errors, warnings = problems(cfg)
    if errors:
        raise MissingDependencyError("\n  ".join(["this config needs packages that are missing:", *errors]))
    if warnings and _announcer():
        for text in warnings:
            print(f"warning: {text} (the run goes on without it)", file=sys.stderr)


def _announcer() -> bool:
    """The process that speaks for the job: the one `--nproc` spawned from, or rank 0 of a launcher."""
    from apps.launch import SPAWNED, detect
    from pycomm import settings

    return not settings.get(SPAWNED) and detect().rank == 0


def check_serve() -> None:
    """apps.serve's packages, before any rank starts: MissingDependencyError with the install line."""
    missing = [f"{d.module} {p}: {d.install_line()}" for d in SERVE if (p := d.problem())]
    if missing:
        raise MissingDependencyError("\n  ".join(["python -m apps.serve needs packages that are missing:", *missing]))


def require(key: str, value: Any, module: str | None = None) -> ModuleType:
    """Import what config key=value needs (`module`, default the package itself), or raise
    MissingDependencyError with the install line: the import points' counterpart to check()."""
    need = next(n for n in NEEDS if n.key == key)
    problem = need.dependency.problem()
    if problem is None:
        try:
            return importlib.import_module(module or need.dependency.module)
        except ImportError as e:
            problem = f"does not import ({e})"
    raise MissingDependencyError(explain(setting(key, value), need.dependency, problem, need.instead))
