"""Loading the compiled core, with an error that says how to build it when it is missing."""

from __future__ import annotations

import functools
import importlib.machinery
import os
import sys
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def core() -> ModuleType:
    try:
        from pycomm import _C
    except ImportError as e:
        raise ImportError(missing_core_message(PACKAGE_DIR, e)) from e
    from pycomm import settings

    settings.apply()  # the core reads no environment: it gets the PYCOMM_* values before any use
    return _C


def missing_core_message(package_dir: Path, error: ImportError) -> str:
    """What to do when pycomm._C cannot be imported from `package_dir`, which differs between a
    source checkout (an unbuilt pycomm/ shadowing an installed one, typically) and an installation."""
    built = sorted(package_dir.glob("_C*.so")) + sorted(package_dir.glob("_C*.pyd"))
    if built:
        return (
            f"pycomm's compiled core {built[0]} is there but does not load: {error}. Rebuild it (`make build` in "
            "the source checkout, or `pip install .` again) against the Python, torch and MPI used here."
        )
    checkout = package_dir.parent
    if not ((checkout / "CMakeLists.txt").is_file() and (checkout / "setup.py").is_file()):
        return (
            f"pycomm's compiled core pycomm._C is missing from {package_dir}: reinstall pycomm with "
            f"`pip install .` from its source tree. ({error})"
        )
    installed = installed_elsewhere(checkout)
    use_installed = (
        f"run from a directory outside {checkout} to use the installed pycomm at {installed}"
        if installed
        else f"install it (`pip install .` in {checkout}) and run from a directory outside the checkout"
    )
    return (
        f"pycomm is being imported from the source checkout {package_dir} (Python puts the current directory "
        f"or the script's directory first on sys.path), and there pycomm._C is not built. Either build it in "
        f"place: `make build` in {checkout} (needs cmake >= 3.18, ninja and pybind11: "
        f"`{Path(sys.executable).name} -m pip install cmake ninja pybind11`); or {use_installed}. ({error})"
    )


def installed_elsewhere(checkout: Path) -> str | None:
    """Where a pycomm outside `checkout` would be imported from (an installed one), if anywhere."""
    paths = [p for p in sys.path if Path(p or os.getcwd()).resolve() != checkout.resolve()]
    spec = importlib.machinery.PathFinder.find_spec("pycomm", paths)
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(list(spec.submodule_search_locations)[0])


def build_info() -> dict:
    """What the compiled core was built with: cpu, openmp, cuda, hip, mpi, nccl, nvtx, gpu_archs."""
    return dict(_build_info_cached())


@functools.lru_cache(maxsize=None)
def _build_info_cached() -> tuple:
    return tuple(core().build_info().items())
