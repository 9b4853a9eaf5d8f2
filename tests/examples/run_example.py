"""Running an example as its opening lines tell a user to: from the checkout root, `mpirun -n 2 python
examples/NAME.py ...` (plus the flags a root user on 2 cores needs: --allow-run-as-root, --oversubscribe)
or plain `python examples/NAME.py`, with the checkout NOT on PYTHONPATH: an example must find pycomm,
algorithms and apps by itself."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.launch import ROOT, mpirun_argv

EXAMPLES = ROOT / "examples"


def user_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the checkout on PYTHONPATH (tests.launch.worker_env puts it there)."""
    env = dict(os.environ)
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    env.setdefault("OMP_NUM_THREADS", "1")  # ranks share 2 cores
    env.setdefault("PYCOMM_TIMEOUT", "120")  # a hang becomes an error
    env.update(extra or {})
    return env


def docstring(name: str) -> str:
    return ast.get_docstring(ast.parse((EXAMPLES / name).read_text())) or ""


def run(name: str, *args: str, ranks: int | None = 2, timeout: float = 300) -> subprocess.CompletedProcess:
    """`mpirun -n RANKS python examples/NAME ARGS` (ranks=None: `python examples/NAME ARGS`), which the
    example's docstring must show; fails with all output unless it exits 0."""
    shown = f"mpirun -n {ranks} python examples/{name}" if ranks else f"python examples/{name}"
    assert re.search(rf"^\s*{re.escape(shown)}", docstring(name), re.M), f"examples/{name} does not show `{shown}`"
    launcher = [*mpirun_argv(ranks), sys.executable] if ranks else [sys.executable]
    argv = [*launcher, f"examples/{name}", *args]
    proc = subprocess.run(argv, cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def numbers(pattern: str, text: str) -> list[float]:
    """The number each match of `pattern` (one group) captures, in order."""
    return [float(m) for m in re.findall(pattern, text)]
