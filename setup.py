"""Build pycomm._C with CMake + ninja. Component switches come from the environment:
PYCOMM_CUDA, PYCOMM_HIP, PYCOMM_MPI, PYCOMM_NCCL, PYCOMM_NVTX (auto|on|off),
PYCOMM_CUDA_ARCHS (default "80;90"), PYCOMM_HIP_ARCHS (default "gfx90a"), PYCOMM_BUILD_TYPE.
PYCOMM_CUDA/PYCOMM_HIP=auto compile GPU kernels only where a GPU is visible or the ARCHS are given
(cmake/PycommGpuChoice.cmake); `pip install -v .` shows the decision."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
OPTIONS = (
    "PYCOMM_CUDA",
    "PYCOMM_HIP",
    "PYCOMM_MPI",
    "PYCOMM_NCCL",
    "PYCOMM_NVTX",
    "PYCOMM_CUDA_ARCHS",
    "PYCOMM_HIP_ARCHS",
)


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [
            f"-S{ROOT}",
            f"-B{build_dir}",
            f"-DPYCOMM_OUTPUT_DIR={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('PYCOMM_BUILD_TYPE', 'Release')}",
        ]
        try:
            import pybind11

            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        if shutil.which("ninja"):
            args.append("-GNinja")
        args += [f"-D{k}={os.environ[k]}" for k in OPTIONS if k in os.environ]
        subprocess.run(["cmake", *args], check=True)
        jobs = os.environ.get("PYCOMM_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs], check=True)


# All three layers: the runtime, the algorithms on it, and the applications with their shipped configs,
# the embedded MNIST files, the sbatch examples and apps.serve's web page (non-Python files, hence package_data).
setup(
    packages=find_packages(include=["pycomm", "pycomm.*", "algorithms", "algorithms.*", "apps", "apps.*"]),
    package_data={"apps": ["configs/*.yaml", "data/embedded/*", "slurm/*.sbatch", "serve/static/*"]},
    ext_modules=[CMakeExtension("pycomm._C")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
