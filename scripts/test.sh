#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh --test), then runs the whole test suite. Extra arguments go
# to pytest (e.g. `scripts/test.sh tests/kernels -k pack`). Exits with pytest's status: any failure,
# and also "no tests collected" (5), is non-zero.
# The whole suite runs as two pytest processes at once (tests/conftest.py's --part): the tests that start
# ranks keep the cores busy, the rest mostly wait on processes, sockets and timeouts (run one after the
# other, the two left a 2-core machine 31% idle), so the rest fills the ranks' idle time instead of adding to
# the wall time (41 -> 26 minutes there). The rest's report follows the ranks' one; the exit status is the
# first non-zero of the two.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$PYCOMM_ROOT"
bash scripts/setup.sh --test
section "tests: pytest"
pytest=("$(pycomm_python)" -m pytest -q -ra --durations=15 --timeout=1800)
if [ $# -gt 0 ]; then
  exec "${pytest[@]}" "$@"
fi
parts="$(mktemp -d "${TMPDIR:-/tmp}/pycomm-tests.XXXXXX")"
trap 'if [ -n "${rest_pid:-}" ]; then kill -- -"$rest_pid" 2>/dev/null || true; fi; rm -rf "$parts"' EXIT
trap 'exit 130' INT TERM  # Ctrl-C stops the ranks' pytest and, through the EXIT trap, the rest's
# job control on for the rest: a script's background job otherwise ignores SIGINT, and so would every process
# its tests start (a Ctrl-C a test sends would be slept through); it also gets a process group of its own
set -m
"${pytest[@]}" --part rest --basetemp "$parts/rest" >"$parts/rest.log" 2>&1 &
rest_pid=$!
set +m
ranks_status=0
"${pytest[@]}" --part ranks --basetemp "$parts/ranks" || ranks_status=$?
rest_status=0
wait "$rest_pid" || rest_status=$?
rest_pid=
section "tests: the rest (pytest --part rest, run beside the ranks)"
cat "$parts/rest.log"
[ "$ranks_status" -ne 0 ] && exit "$ranks_status"
exit "$rest_status"
