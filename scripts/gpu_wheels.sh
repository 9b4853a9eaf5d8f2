#!/usr/bin/env bash
# Downloads into this checkout's git-ignored .whl/ the wheels a lent GPU machine lacks (scripts/gpu_wheels.txt:
# an Open MPI and the mpi4py that loads it), for CPython 3.12 on x86-64, one version each, no dependencies
# pulled (each is named in the list); drops wheels no longer listed; checks the total (<= 50 MiB) and that
# the Open MPI wheel starts 2 ranks as root here. Run it in the checkout whose `run` call carries `.whl`
# (docs/gpu.md). Usage: scripts/gpu_wheels.sh [DEST]   (default: .whl)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
exec "$(pycomm_python)" -m scripts.gpu_check.wheels "$@"
