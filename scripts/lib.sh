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

# The interpreter all scripts use: $PYTHON if set, else the repo's .venv (scripts/setup.sh makes it),
# else python3.
pycomm_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
  elif [[ -x "$PYCOMM_ROOT/.venv/bin/python" ]]; then echo "$PYCOMM_ROOT/.venv/bin/python"
  else echo python3
  fi
}

# Makes pycomm_python one that pip can install into: pycomm's own virtual environment, .venv, so that
# nothing is installed into the system's interpreter (a distribution's python3 refuses it anyway, PEP 668).
# PYTHON=/path/to/python, when set, is used as it is.
ensure_pip_python() {
  [[ -n "${PYTHON:-}" ]] && return 0
  "$PYCOMM_ROOT/.venv/bin/python" -m pip --version >/dev/null 2>&1 && return 0
  command -v python3 >/dev/null || apt_install python3
  echo "creating .venv, pycomm's virtual environment (the scripts use it from now on)"
  rm -rf "$PYCOMM_ROOT/.venv"   # a half-made one (no pip)
  if ! python3 -m venv "$PYCOMM_ROOT/.venv"; then   # Debian packages venv's pip apart
    rm -rf "$PYCOMM_ROOT/.venv"
    apt_install python3-venv
    python3 -m venv "$PYCOMM_ROOT/.venv"
  fi
}
