# Shared helpers for scripts/*.sh and .ci/run (sourced, not run). Assumes `set -euo pipefail`.

PYCOMM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

section() { printf '\n==== %s  [%s, +%ss] ====\n' "$*" "$(date -u +%H:%M:%S)" "$SECONDS"; }
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

die() { echo "error: $*" >&2; exit 1; }

# Run as root: directly when we are root, through sudo otherwise.
as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root or sudo to run: $*"
  fi
}

# Install the Debian/Ubuntu packages that are missing (none missing: no apt call at all).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null || die "no apt-get: install these yourself: ${missing[*]}"
  echo "apt-get install ${missing[*]}"
  if [[ -z "${PYCOMM_APT_UPDATED:-}" ]]; then
    as_root apt-get update -q
    export PYCOMM_APT_UPDATED=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The interpreter all scripts use: $PYTHON if set, else the repo's .venv when scripts/setup.sh made
# one (python3 being the distribution's externally managed one), else python3.
pycomm_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
  elif [[ -x "$PYCOMM_ROOT/.venv/bin/python" ]]; then echo "$PYCOMM_ROOT/.venv/bin/python"
  else echo python3
  fi
}

# Makes pycomm_python one that pip can install into. A distribution's python3 refuses pip installs
# (PEP 668): pycomm gets its own venv, .venv, then (the scripts use it from now on). PYTHON, when set, is
# used as it is.
ensure_pip_python() {
  [[ -n "${PYTHON:-}" || -x "$PYCOMM_ROOT/.venv/bin/python" ]] && return 0
  command -v python3 >/dev/null || apt_install python3 python3-dev python3-venv
  if python3 -c 'import os, sys, sysconfig
managed = sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if managed else 1)'; then
    apt_install python3-dev python3-venv
    echo "python3 is externally managed: creating .venv (the scripts use it from now on)"
    python3 -m venv "$PYCOMM_ROOT/.venv"
  fi
}
