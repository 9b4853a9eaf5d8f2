"""An unbuilt pycomm/ in a source checkout shadows the installed package when Python runs from the
checkout: the error must say what to do there (make build, and what it needs) or where else to run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.launch import ROOT

BUILD_INFO = "import pycomm; print('build_info', pycomm.build_info())"


def package_copy(dest: Path, with_core: bool) -> Path:
    """A copy of pycomm/ under dest, with or without the compiled core."""
    skip = ["__pycache__"] + ([] if with_core else ["_C*.so", "_C*.pyd"])
    shutil.copytree(ROOT / "pycomm", dest / "pycomm", ignore=shutil.ignore_patterns(*skip))
    return dest / "pycomm"


def unbuilt_checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    package_copy(checkout, with_core=False)
    for name in ("CMakeLists.txt", "setup.py"):
        shutil.copy(ROOT / name, checkout / name)
    return checkout


def python(code: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_unbuilt_checkout_without_an_install_says_build_or_install(tmp_path: Path) -> None:
    checkout = unbuilt_checkout(tmp_path)
    proc = python(BUILD_INFO, checkout)
    assert proc.returncode != 0
    err = proc.stderr.splitlines()[-1]
    assert f"imported from the source checkout {checkout / 'pycomm'}" in err, err
    assert f"`make build` in {checkout}" in err and "pip install cmake ninja pybind11" in err, err
    assert f"install it (`pip install .` in {checkout})" in err, err


def test_unbuilt_checkout_shadowing_an_install_names_it_and_the_install_works_elsewhere(tmp_path: Path) -> None:
    checkout = unbuilt_checkout(tmp_path)
    site = tmp_path / "site"
    installed = package_copy(site, with_core=True)
    proc = python(BUILD_INFO, checkout, pythonpath=site)
    assert proc.returncode != 0
    err = proc.stderr.splitlines()[-1]
    assert f"run from a directory outside {checkout} to use the installed pycomm at {installed}" in err, err
    elsewhere = python(BUILD_INFO, tmp_path, pythonpath=site)
    assert elsewhere.returncode == 0 and "build_info {'cpu': True" in elsewhere.stdout, elsewhere.stderr


def test_installed_package_without_its_core_says_reinstall(tmp_path: Path) -> None:
    package_copy(tmp_path / "site", with_core=False)
    proc = python(BUILD_INFO, tmp_path, pythonpath=tmp_path / "site")
    assert proc.returncode != 0
    assert "compiled core pycomm._C is missing from" in proc.stderr and "pip install ." in proc.stderr, proc.stderr


def test_importing_the_layers_without_a_core_leaves_no_traceback_at_exit(tmp_path: Path) -> None:
    """Nothing needs the core until a communicator or kernel is used, so `import algorithms` works in an
    unbuilt checkout; the exit must stay quiet too (pycomm.finalize at exit has nothing to finalise)."""
    checkout = unbuilt_checkout(tmp_path)
    shutil.copytree(ROOT / "algorithms", checkout / "algorithms", ignore=shutil.ignore_patterns("__pycache__"))
    proc = python("import algorithms; print('imported', 'mbsgd' in algorithms.available())", checkout)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_without_torch_the_import_says_which_torch_to_install() -> None:
    """`pip install .` declares no torch (an unpinned one pulls GBs of CUDA wheels): the import says which."""
    # sys.modules["torch"] = None: the import fails as it does where torch is not installed
    p = python("import sys; sys.modules['torch'] = None; import pycomm", cwd=ROOT)
    assert p.returncode == 1 and "ImportError: pycomm needs PyTorch, which is not installed" in p.stderr, p.stderr
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in p.stderr, p.stderr
