#!/usr/bin/env bash
# Proves `pip install .` works as a user runs it: with build isolation (setuptools, pybind11, cmake and
# ninja come from PyPI per pyproject.toml), into a throwaway venv that sees this Python's packages
# (torch, mpi4py), then imported from outside the source tree. Build switches come from the
# environment (PYCOMM_CUDA etc.); CI sets PYCOMM_CUDA=off PYCOMM_HIP=off since the GPU builds are
# proven by scripts/gpu_compile_check.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
PY="$(pycomm_python)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv --system-site-packages "$tmp/venv"
# A copy of the tree, so the build neither sees nor writes this checkout's build/ and pycomm/_C*.so.
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | (mkdir "$tmp/src" && tar -xf - -C "$tmp/src")
"$tmp/venv/bin/python" -m pip install -q "$tmp/src"
cd "$tmp" && "$tmp/venv/bin/python" - <<'PYEOF'
import sysconfig
import pycomm
assert pycomm.__file__.startswith(sysconfig.get_paths()["purelib"]) or pycomm.__file__.startswith(sysconfig.get_paths()["platlib"]), pycomm.__file__
info = pycomm.build_info()
print(f"pip install . -> {pycomm.__file__}\nbuild_info() = {info}")
assert info["cpu"] and info["mpi"], info
PYEOF
