#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh), then runs the main job on its embedded default.
# Extra arguments are passed to it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
bash scripts/setup.sh
section "main job"
exec "$(pycomm_python)" -m apps.train "$@"
