#!/usr/bin/env bash
# Lint and format checks: ruff (lint, then format --check) over the Python tree, clang-format --dry-run over
# csrc/, as configured in pyproject.toml ([tool.ruff]) and .clang-format. Installs the pinned ruff and
# clang-format 14 where missing. Changes nothing: to apply the formats, run
#   ruff check --fix . && ruff format . && clang-format -i <the files below>
# Exits non-zero on any finding.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"

RUFF_VERSION="$(sed -n 's/^ruff==\([0-9.]*\).*/\1/p' scripts/requirements-test.txt)"   # the one pin, in requirements-test.txt
[[ -n $RUFF_VERSION ]] || die "scripts/requirements-test.txt pins no ruff (ruff==X.Y.Z)"
ensure_pip_python
PY="$(pycomm_python)"
if [[ "$("$PY" -m ruff --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]]; then
  "$PY" -m pip install -q "ruff==$RUFF_VERSION"
fi
command -v clang-format-14 >/dev/null || apt_install clang-format-14

status=0
section "lint: ruff check"
"$PY" -m ruff check . || status=1
section "lint: ruff format --check"
"$PY" -m ruff format --check . || status=1
section "lint: clang-format --dry-run (csrc/)"
mapfile -t sources < <(git ls-files -- 'csrc/*.cc' 'csrc/*.h' 'csrc/*.cu' 'csrc/*.cuh' 'csrc/*.hip' 'csrc/*.cpp' \
  'csrc/*.hpp')
[[ ${#sources[@]} -gt 0 ]] || die "no C++ sources under csrc/ (git ls-files found none)"
clang-format-14 --dry-run -Werror "${sources[@]}" || status=1
[[ $status == 0 ]] || die "lint: see the findings above (fix them, or apply the formats as said at the top of $0)"
echo "lint: clean (ruff $RUFF_VERSION, $(clang-format-14 --version | head -1))"
