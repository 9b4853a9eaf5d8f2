#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh --test), then runs the whole test suite. Extra arguments go
# to pytest (e.g. `scripts/test.sh tests/kernels -k pack`). Exits with pytest's status: any failure,
# and also "no tests collected" (5), is non-zero.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
bash scripts/setup.sh --test
section "tests: pytest"
exec "$(pycomm_python)" -m pytest -q -ra --durations=15 --timeout=1800 "$@"
