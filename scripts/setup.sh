#!/usr/bin/env bash
# Sets up everything pycomm needs on a Debian/Ubuntu machine and builds pycomm._C in place.
# Idempotent: installs only what is missing, rebuilds only what changed. Root or sudo for apt.
#   scripts/setup.sh          compilers, CMake, Open MPI; the Python packages of scripts/requirements.txt in
#                             .venv (made here); build; check build_info
#   scripts/setup.sh --test   also what the tests need: the Python packages of scripts/requirements-test.txt,
#                             a single-node SLURM (slurmd, slurmctld, munge), iproute2 and util-linux for
#                             the emulated cluster (benchmarks/cluster.py)
# Environment: PYTHON (interpreter to use instead of .venv), and the build switches PYCOMM_CUDA / PYCOMM_HIP /
# PYCOMM_MPI / PYCOMM_NCCL / PYCOMM_NVTX (auto|on|off), PYCOMM_CUDA_ARCHS, PYCOMM_HIP_ARCHS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"

with_test=0
for arg in "$@"; do
  case "$arg" in
    --test) with_test=1 ;;
    *) die "unknown argument $arg (expected --test)" ;;
  esac
done

# Runs "$@" with Debian's service starts denied (policy-rc.d) unless the machine has its own policy:
# the tests start their own SLURM and munge daemons, and a failing start of the packaged ones (no
# slurm.conf, no init system) would fail the install.
without_service_starts() {
  local policy=/usr/sbin/policy-rc.d rc=0
  [[ -e $policy ]] && { "$@"; return; }
  printf '#!/bin/sh\nexit 101  # pycomm scripts/setup.sh: no service starts during this install\n' \
    | as_root tee $policy >/dev/null
  as_root chmod +x $policy
  "$@" || rc=$?
  as_root rm -f $policy
  return $rc
}

section "setup: system packages"
tools=()
command -v g++ >/dev/null || tools+=(g++)
command -v make >/dev/null || tools+=(make)
command -v cmake >/dev/null || tools+=(cmake)
command -v ninja >/dev/null || tools+=(ninja-build)
# Open MPI from the distribution: mpi4py and pycomm's MPI transport are both built against it.
apt_install "${tools[@]}" openmpi-bin libopenmpi-dev
if [[ $with_test == 1 ]]; then
  # slurm-wlm-basic-plugins (a slurmd dependency) carries mpi_pmix.so for `srun --mpi=pmix`.
  without_service_starts apt_install slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge
  # the apps.serve web page is tested in a real browser (Selenium drives Debian's chromium)
  apt_install chromium chromium-driver
  # the emulated cluster of the multi-node tests (benchmarks/cluster.py): ip/tc, unshare/nsenter
  apt_install iproute2 util-linux
fi

section "setup: Python"
ensure_pip_python   # .venv unless PYTHON is set (scripts/lib.sh)
PY="$(pycomm_python)"
"$PY" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' || die "$PY: pycomm needs Python >= 3.9"
if ! "$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))'; then
  apt_install python3-dev
fi
echo "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
# The main job's packages; the tests' (pytest, selenium, HolisticTraceAnalysis, ...) with --test only.
requirements=scripts/requirements.txt
[[ $with_test == 1 ]] && requirements=scripts/requirements-test.txt
"$PY" -m pip install -q -r "$requirements"

# mpi4py must use the system Open MPI (the one pycomm links): its wheel loads the system libmpi;
# where it does not (another MPI first on the library path, an old mpi4py), rebuild it from source.
mpi4py_uses_system_mpi() {
  local want
  want="$(mpirun --version 2>/dev/null | sed -n 's/.*(Open MPI) \([0-9.]*\).*/\1/p' | head -1)"
  "$PY" - "$want" <<'PYEOF'
import sys
try:
    import mpi4py
    mpi4py.rc.initialize = False
    from mpi4py import MPI
except Exception as e:
    sys.exit(f"mpi4py: not usable ({e})")
lib = MPI.Get_library_version().splitlines()[0]
if f"Open MPI v{sys.argv[1]}" not in lib:
    sys.exit(f"mpi4py: uses {lib!r}, not the system Open MPI {sys.argv[1]}")
print(f"mpi4py {mpi4py.__version__}: {lib}")
PYEOF
}
if ! mpi4py_uses_system_mpi; then
  echo "building mpi4py from source against the system Open MPI"
  "$PY" -m pip install -q --force-reinstall --no-deps --no-cache-dir \
    --no-binary mpi4py mpi4py
  mpi4py_uses_system_mpi || die "mpi4py still does not use the system Open MPI"
fi

section "setup: build pycomm._C in place (make build)"
cmake_args=()
for opt in PYCOMM_CUDA PYCOMM_HIP PYCOMM_MPI PYCOMM_NCCL PYCOMM_NVTX; do
  cmake_args+=("-D$opt=${!opt:-auto}")   # always passed, so a cached build follows the environment
done
for opt in PYCOMM_CUDA_ARCHS PYCOMM_HIP_ARCHS; do
  [[ -n "${!opt:-}" ]] && cmake_args+=("-D'$opt=${!opt}'")   # quoted: the lists contain ';'
done
make -s build PYTHON="$PY" CMAKE_ARGS="${cmake_args[*]}"

# The checkout's own bytecode, compiled once here: every rank of every launch imports these modules, and where
# the environment forbids writing bytecode (PYTHONDONTWRITEBYTECODE=1, common in containers) each process would
# compile them again, about 0.2 s of CPU per rank. Python still reads bytecode then, and recompiles an edited file.
"$PY" -m compileall -q -j 0 pycomm algorithms apps benchmarks examples tests >/dev/null

# The build must have what this machine offers: MPI (we just installed it), NVTX when CUDA is here.
"$PY" - <<'PYEOF'
import os, shutil, sys
import pycomm
info = pycomm.build_info()
print("pycomm.build_info():", info)
wanted = {"cpu": True,
          "mpi": shutil.which("mpicc") is not None and os.environ.get("PYCOMM_MPI", "auto") != "off",
          "nvtx": os.path.isdir("/usr/local/cuda/include/nvtx3") and os.environ.get("PYCOMM_NVTX", "auto") != "off"}
missing = [k for k, want in wanted.items() if want and not info[k]]
sys.exit(f"pycomm was built without {', '.join(missing)}" if missing else 0)
PYEOF
