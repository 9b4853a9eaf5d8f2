#!/usr/bin/env bash
# Proves the GPU builds compile and link on a machine without a GPU (nothing runs on a device):
#   cuda: nvcc, PYCOMM_CUDA_ARCHS="80;90", NCCL from the nvidia-nccl-cu13 wheel   -> build/gpu-cuda
#   hip:  Debian's hipcc + libamdhip64-dev, HIP_PLATFORM=amd, gfx90a               -> build/gpu-hip
# Each module is then imported (from its own package copy, not the source tree) and must report the
# component it was built for. Usage: scripts/gpu_compile_check.sh [cuda] [hip]   (default: both)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
PY="$(pycomm_python)"
kinds=("$@")
[[ ${#kinds[@]} -gt 0 ]] || kinds=(cuda hip)

# Configure + build into build/gpu-<kind>, with _C written into build/gpu-<kind>/pkg/pycomm.
build_variant() {
  local kind=$1; shift
  local dir="build/gpu-$kind"
  cmake -S . -B "$dir" -GNinja -DPython_EXECUTABLE="$(command -v "$PY")" \
    -DPYCOMM_OUTPUT_DIR="$PYCOMM_ROOT/$dir/pkg/pycomm" -DPYCOMM_MPI=on -DPYCOMM_NVTX=auto "$@"
  cmake --build "$dir" -j "$(nproc)"
}

# Import the built module from a copy of the Python package and check what it reports.
import_check() {
  local kind=$1 expect=$2 dir="build/gpu-$1"
  "$PY" -c 'import shutil, sys; shutil.copytree("pycomm", sys.argv[1], dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("_C*.so", "__pycache__"))' "$dir/pkg/pycomm"
  (cd "$dir/pkg" && "$PY" - "$kind" "$expect" <<'PYEOF'
import sys
import pycomm
kind, archs = sys.argv[1], sys.argv[2]
assert pycomm.__file__.startswith(__import__("os").getcwd()), pycomm.__file__
info = pycomm.build_info()
print(f"{kind} build imports; build_info() = {info}")
assert info[kind] and info["cpu"] and info["gpu_archs"] == archs, info
PYEOF
  )
}

check_cuda() {
  section "GPU compile check: CUDA (sm_80, sm_90) with NCCL from the nvidia-nccl-cu13 wheel"
  "$PY" -m pip install -q nvidia-nccl-cu13
  # NCCL is required once the NCCL transport sources exist; until then header + library must be found.
  local nccl=auto
  compgen -G "csrc/transport/nccl/*.cc" >/dev/null && nccl=on
  build_variant cuda -DPYCOMM_CUDA=on -DPYCOMM_HIP=off -DPYCOMM_NCCL=$nccl "-DPYCOMM_CUDA_ARCHS=80;90"
  grep -E '^PYCOMM_NCCL_(INCLUDE|LIB):' build/gpu-cuda/CMakeCache.txt
  if grep -qE '^PYCOMM_NCCL_(INCLUDE|LIB):.*NOTFOUND' build/gpu-cuda/CMakeCache.txt; then
    die "NCCL header or library from the nvidia-nccl-cu13 wheel not found by cmake/PycommNccl.cmake"
  fi
  import_check cuda "80,90"
}

check_hip() {
  section "GPU compile check: HIP (Debian hipcc, HIP_PLATFORM=amd, gfx90a)"
  if ! command -v hipcc >/dev/null; then
    # Before installing hipcc: PYCOMM_HIP=on without it must stop with a message saying what to do.
    local log; log="$(mktemp)"
    if cmake -S . -B build/gpu-hip-missing -GNinja -DPython_EXECUTABLE="$(command -v "$PY")" \
         -DPYCOMM_CUDA=off -DPYCOMM_HIP=on >"$log" 2>&1; then
      die "configuring with PYCOMM_HIP=on and no hipcc succeeded; it must fail"
    fi
    grep -q "PYCOMM_HIP=on, but hipcc was not found" "$log" || { cat "$log"; die "unclear error without hipcc"; }
    echo "PYCOMM_HIP=on without hipcc fails as it should: $(grep -m1 'PYCOMM_HIP=on' "$log")"
    rm -rf "$log" build/gpu-hip-missing
  fi
  apt_install hipcc libamdhip64-dev
  build_variant hip -DPYCOMM_CUDA=off -DPYCOMM_HIP=on -DPYCOMM_NCCL=auto -DPYCOMM_HIP_ARCHS=gfx90a
  import_check hip "gfx90a"
}

for kind in "${kinds[@]}"; do
  case "$kind" in
    cuda) check_cuda ;;
    hip) check_hip ;;
    *) die "unknown GPU kind $kind (expected cuda or hip)" ;;
  esac
done
