"""apps.requirements: a config's optional packages are checked before any rank starts, with the exact
install line (torchvision pinned to the installed torch); plots never fail a run that trained."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import operator
import subprocess
import sys
import types
from pathlib import Path

import pytest

from apps import requirements
from apps.config import loading
from tests.apps import runs
from tests.launch import ROOT, worker_env

# Runs `python -m apps.train ARGS` in this process with the named modules made unimportable
# (sys.modules[name] = None makes both find_spec and import fail, as for a missing package).
WITHOUT = (
    "import sys\nfor name in sys.argv[1].split(','): sys.modules[name] = None\n"
    "from apps.train import main\nsys.exit(main(sys.argv[2:]))"
)
# The same, with a plotting function that raises.
PLOT_RAISES = (
    "import sys, apps.plot\n"
    "def boom(*args, **kwargs): raise RuntimeError('plotting broke')\n"
    "apps.plot.plot_runs = boom\n"
    "from apps.train import main\nsys.exit(main(sys.argv[1:]))"
)


def train_without(modules: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, *args],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_config_with_missing_packages_fails_before_launch_with_install_lines(tmp_path: Path) -> None:
    # qsr_vit_adamw: logging.wandb=offline and data.name=imagefolder; --nproc 2 would start mpirun.
    args = ["--config", "qsr_vit_adamw.yaml", "--nproc", "2", "-o", f"out_dir={tmp_path}"]
    proc = train_without("wandb,torchvision", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    pin = requirements.torchvision_for(requirements.torch_version())
    assert "logging.wandb=offline needs wandb, which is not installed: pip install wandb" in proc.stderr
    assert "or set logging.wandb=disabled" in proc.stderr
    assert (
        f"data.name=imagefolder needs torchvision, which is not installed: pip install torchvision=={pin}"
        in proc.stderr
    ), proc.stderr
    assert not (tmp_path / "qsr-vit-adamw").exists(), "a rank started: the run directory was created"
    assert proc.stdout == "", proc.stdout  # no rank printed anything
    printed = train_without("wandb", *args, "-o", "data.name=mnist", "--print-config")
    assert printed.returncode == 2 and "needs wandb" in printed.stderr, "--print-config must fail as the run would"


def test_check_passes_what_is_installed_and_lists_every_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = loading.load(None, ["logging.wandb=online", "logging.tensorboard=true"])
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(requirements.MissingDependencyError) as info:
        requirements.check(cfg)
    assert isinstance(info.value, ImportError) and isinstance(info.value, loading.ConfigError)
    text = str(info.value)
    assert "logging.wandb=online needs wandb" in text and "logging.tensorboard=true needs tensorboard" in text
    assert "pip install tensorboard (or pip install '.[tensorboard]' in the pycomm checkout)" in text, text
    requirements.check(loading.load(None, []))  # the default run needs nothing optional but matplotlib


def test_missing_matplotlib_only_warns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    requirements.check(loading.load(None, []))
    err = capsys.readouterr().err
    assert "warning: logging.plot=true needs matplotlib, which is not installed: pip install matplotlib" in err
    assert "set logging.plot=false" in err
    requirements.check(loading.load(None, ["logging.plot=false"]))
    assert capsys.readouterr().err == ""


def test_import_points_raise_the_same_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"logging.wandb=offline needs wandb, .*: pip install wandb"):
        requirements.require("logging.wandb", "offline")
    assert requirements.require("logging.plot", True, "matplotlib.colors").__name__ == "matplotlib.colors"


@pytest.mark.parametrize(
    "torch, vision", [("2.13.0", "0.28.0"), ("2.13.0+cpu", "0.28.0"), ("2.5.1", "0.20.1"), ("2.0.0", "0.15.0")]
)
def test_torchvision_pin_pairs_with_torch(torch: str, vision: str) -> None:
    assert requirements.torchvision_for(torch) == vision


def test_torchvision_install_line_keeps_the_installed_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requirements, "torch_version", lambda: "2.13.0+cpu")
    line = requirements.TORCHVISION.install_line()
    assert line.startswith(f"pip install torchvision==0.28.0 --index-url {requirements.CPU_WHEELS}"), line
    monkeypatch.setattr(requirements, "torch_version", lambda: "2.13.0")
    assert requirements.TORCHVISION.install_line().startswith("pip install torchvision==0.28.0 (")
    assert requirements.torch_required_by(["numpy", "torch (==2.13.0)", "pillow"]) == "2.13.0"
    assert requirements.torch_required_by(["torch==2.12.1"]) == "2.12.1"
    assert requirements.torch_required_by(["torchaudio==2.13.0", "numpy"]) is None


def test_torchvision_built_for_another_torch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("torchvision")
    fake.__spec__ = importlib.machinery.ModuleSpec("torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    versions = {"torch": "2.13.0+cpu", "torchvision": "0.29.0"}
    monkeypatch.setattr(importlib.metadata, "version", versions.__getitem__)
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: ["numpy", "torch (==2.14.0)"])
    refused = requirements.TORCHVISION.problem()
    assert refused == "is version 0.29.0, built for torch 2.14.0, not the installed torch 2.13.0", refused
    with pytest.raises(requirements.MissingDependencyError, match=r"pip install torchvision==0\.28\.0 --index-url"):
        requirements.check(loading.load(None, ["data.name=imagefolder", "data.path=/nowhere"]))
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: ["numpy", "torch (==2.13.0)"])
    assert requirements.TORCHVISION.problem() is None


def test_pyproject_declares_the_extras_with_the_torch_pin() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"plots", "tensorboard", "wandb", "hf", "vision", "serve", "mpi", "test"} <= extras.keys(), extras
    torch_pin = next(
        line.split("==")[1]
        for line in (ROOT / "scripts" / "requirements.txt").read_text().splitlines()
        if line.startswith("torch==")
    )
    assert extras["vision"] == [f"torchvision=={requirements.torchvision_for(torch_pin)}"], (extras, torch_pin)
    for dep in requirements.DEPENDENCIES:
        assert any(req.split("=")[0] == dep.package for req in extras[dep.extra]), (dep, extras[dep.extra])
    # what a default config uses is a default dependency, not an extra: logging.plot is on by default
    defaults = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    default_needs = [
        need.dependency.package
        for need in requirements.NEEDS
        if need.applies(operator.attrgetter(need.key)(loading.load(None)))
    ]
    assert default_needs and all(package in defaults for package in default_needs), (default_needs, defaults)


@pytest.mark.parametrize("how", ["plotting raises", "matplotlib missing"])
def test_a_plotting_failure_never_fails_a_finished_run(tmp_path: Path, how: str) -> None:
    argv = runs.args(tmp_path, "p", "none", 1, "-o", "train.max_steps=5", "-o", "logging.plot=true")[2:]
    code = [PLOT_RAISES] if how == "plotting raises" else [WITHOUT, "matplotlib"]
    proc = subprocess.run(
        [sys.executable, "-c", *code, *argv], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "step 5/5" in proc.stdout and (tmp_path / "p" / "train.csv").exists()
    assert "warning: the run finished but its plots were not drawn" in proc.stderr, proc.stderr
    assert f"draw them later with `python -m apps.plot {tmp_path / 'p'}`" in proc.stderr
    assert ("plotting broke" if how == "plotting raises" else "pip install matplotlib") in proc.stderr
    assert not list((tmp_path / "p").glob("*.png"))


@pytest.mark.parametrize(
    "command",
    [
        "import sys\nsys.modules['matplotlib'] = None\nfrom apps.plot_command import main\nsys.exit(main(['runs/x']))",
        "import sys, runpy\nsys.modules['matplotlib'] = None\nsys.argv = ['apps.plot', 'runs/x']\n"
        "runpy.run_module('apps.plot', run_name='__main__')",
    ],
)
def test_plot_command_without_matplotlib_says_what_to_install(command: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", command], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "needs matplotlib" in proc.stderr and "pip install matplotlib" in proc.stderr, proc.stderr
