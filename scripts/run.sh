#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh), then runs the main job on its embedded default into
# runs/mnist-cnn-plsgd; run again, it continues that run (--resume auto), or says it is finished.
# Arguments replace --resume auto and go to the main job (`python -m apps.train`) as they are.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
bash scripts/setup.sh
section "main job"
[[ $# -gt 0 ]] || set -- --resume auto
exec "$(pycomm_python)" -m apps.train "$@"
