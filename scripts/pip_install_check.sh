#!/usr/bin/env bash
# Proves `pip install .` works as a user runs it: with build isolation (setuptools, pybind11, cmake and
# ninja come from PyPI per pyproject.toml), into a throwaway venv that sees this Python's packages
# (torch, mpi4py), then used from outside the source tree: all three layers (pycomm, algorithms,
# apps with its configs and embedded MNIST), the console scripts, `python -m apps.train` (a
# shipped config on 2 ranks for a few steps) and `pycomm-serve` (its page, GET / and /app.js). Build switches come from the environment (PYCOMM_CUDA
# etc.); CI sets PYCOMM_CUDA=off PYCOMM_HIP=off since the GPU builds are proven by
# scripts/gpu_compile_check.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
PY="$(pycomm_python)"

# The in-place build (scripts/setup.sh) is Release; this one builds RelWithDebInfo unless told otherwise,
# so both build types a user may pick are proven to load (Release's LTO once hid a missing MPI C++ symbol
# that left every other build type's core unloadable).
export PYCOMM_BUILD_TYPE="${PYCOMM_BUILD_TYPE:-RelWithDebInfo}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv --system-site-packages "$tmp/venv"
# --system-site-packages sees the base interpreter's packages only: when $PY is itself a venv's (.venv,
# as scripts/setup.sh makes it), a .pth file adds that venv's, after the throwaway venv's own.
"$tmp/venv/bin/python" - "$("$PY" -c 'import site; print("\n".join(site.getsitepackages()))')" <<'PYEOF'
import site, sys
from pathlib import Path
Path(site.getsitepackages()[0], "outer-venv.pth").write_text(sys.argv[1] + "\n")
PYEOF
"$tmp/venv/bin/python" -c 'import torch, mpi4py' || die "the throwaway venv does not see $PY's torch and mpi4py"
# A copy of the tree, so the build neither sees nor writes this checkout's build/ and pycomm/_C*.so.
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | (mkdir "$tmp/src" && tar -xf - -C "$tmp/src")
"$tmp/venv/bin/python" -m pip install -q "$tmp/src"
rm -rf "$tmp/src"  # nothing below may find the sources: only what was installed
mkdir "$tmp/elsewhere" && cd "$tmp/elsewhere"
"$tmp/venv/bin/python" - <<'PYEOF'
import sysconfig
from pathlib import Path
import algorithms, apps, pycomm
site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
for module in (pycomm, algorithms, apps):
    assert any(module.__file__.startswith(d) for d in site), f"{module.__name__} imported from {module.__file__}"
info = pycomm.build_info()
print(f"pip install . -> {Path(pycomm.__file__).parent.parent}\nbuild_info() = {info}")
assert info["cpu"] and info["mpi"], info
installed = Path(apps.__file__).parent
for data in ("configs/default.yaml", "configs/qsr_vit_adamw.yaml", "data/embedded/t10k-images-idx3-ubyte.gz",
             "data/embedded/t10k-labels-idx1-ubyte.gz", "slurm/s3df.sbatch"):
    assert (installed / data).is_file(), f"apps/{data} was not installed"
import algorithms.plsgd, apps.train  # noqa: E401,F401  (the layers import each other from the install)
PYEOF
section "pip install .: python -m apps.train and the console scripts, from $PWD"
"$tmp/venv/bin/python" -m apps.train --help >/dev/null
for script in pycomm-train pycomm-plot pycomm-serve; do
  "$tmp/venv/bin/$script" --help | grep -q "^usage: $script " || die "$script --help failed or does not say usage: $script"
done
# A shipped config by name (the embedded default's; small CNN -> an MLP for speed, embedded MNIST) on
# 2 ranks for a few steps: the ranks, too, must find the installed packages.
"$tmp/venv/bin/python" -m apps.train --config default.yaml --nproc 2 -o model.name=mlp -o train.max_steps=4 \
  -o logging.plot=false -o "out_dir=$tmp/runs" -o name=installed | tail -2
[[ -s "$tmp/runs/installed/train.csv" ]] || die "python -m apps.train wrote no $tmp/runs/installed/train.csv"
echo "python -m apps.train, pycomm-train and pycomm-plot work from the installed package"

section "pip install .: pycomm-serve serves its page from the installed package"
# A tiny random GPT on one rank; the page's files must come from the installed apps/serve/static/.
"$tmp/venv/bin/python" - "$tmp/venv/bin/pycomm-serve" <<'PYEOF'
import signal, socket, subprocess, sys, time, urllib.request
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = subprocess.Popen([sys.argv[1], "--port", str(port), "-o", "model.options.n_layer=1", "-o",
                           "model.options.n_embd=32", "-o", "model.options.n_head=1"])
url = f"http://127.0.0.1:{port}"
try:
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=5)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"pycomm-serve did not answer /health (exit code {server.poll()})")
            time.sleep(0.5)
    for path, expected in (("/", b"<!doctype html>"), ("/app.js", b"use strict")):
        with urllib.request.urlopen(url + path, timeout=30) as r:
            body = r.read()
        assert r.status == 200 and expected in body, f"GET {path}: {r.status} {body[:200]!r}"
        print(f"GET {path}: {r.status}, {len(body)} bytes from the installed package")
finally:
    server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=60)
assert code == 0, f"pycomm-serve exited {code} after SIGTERM"
PYEOF
