#!/usr/bin/env bash
# One command for a one-GPU machine (NVIDIA H100/H200): installs the carried wheels (.whl/, made here by
# scripts/gpu_wheels.sh), builds pycomm for sm_90 with every core, runs the GPU tests and the GPU benchmark
# in order of value within a time budget, and writes summary.txt, junit.xml, failures.log, logs.tar.gz and
# kernels_gpu.json + PNG into RESULTS_DIR ($OUT when set). --dry-run checks everything it names without a
# GPU (CI). docs/gpu.md says how to run it and read its results.
# Usage: scripts/gpu_check.sh [--dry-run] [--budget SECONDS] [--phases LIST] [RESULTS_DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
# On the GPU machine python3 is the image's (torch with CUDA); here, pycomm's usual interpreter.
exec "$(pycomm_python)" -m scripts.gpu_check "$@"
