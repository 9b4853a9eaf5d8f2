"""The README tables of PYCOMM_* variables are generated from pycomm/settings.py and must match it;
no other place reads them (the C++ core reads no environment at all, and every PYCOMM_* name in the
Python sources and scripts is declared)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pycomm import settings, settings_doc
from tests.launch import ROOT, worker_env

# Names that look like settings but are not environment variables: CMake cache variables passed with
# -D by tests/infra/test_gpu_choice.py, a shell variable of scripts/lib.sh, and the deliberate
# misspellings of tests/comm/test_settings.py.
NOT_VARIABLES = {"PYCOMM_NVCC", "PYCOMM_HIPCC", "PYCOMM_ROOT", "PYCOMM_TIMOUT", "PYCOMM_INLINE_BYTE",
                 "PYCOMM_NUMTHREADS", "PYCOMM_APPS_FAILAT"}
SOURCES = ("pycomm", "apps", "algorithms", "benchmarks", "tests", "scripts", "setup.py", ".ci/run", "Makefile")


def test_readme_tables_match_the_declarations():
    stale = settings_doc.stale_readmes(ROOT)
    assert not stale, (f"the settings tables of {', '.join(stale)} differ from pycomm/settings.py: run "
                       f"`{settings_doc.UPDATE_COMMAND}` and commit the result")


def test_a_hand_edited_table_is_noticed_and_regenerated():
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `PYCOMM_SPIN_US` |"))
    edited = readme.replace(row, row.replace("250", "100"))
    assert edited != readme
    assert settings_doc.updated(edited, settings_doc.README_TABLES["README.md"], "README.md") == readme
    with pytest.raises(ValueError, match="(?s)README.md has no settings table .runtime.*--update-readme"):
        settings_doc.updated("no tables here", ("runtime",), "README.md")


def test_tables_hold_every_setting_of_their_scope_with_its_accepted_values():
    for scope in (settings.RUNTIME, settings.APPS, settings.BUILD):
        table = settings_doc.markdown(scope)
        for s in settings.SETTINGS:
            assert (f"| `{s.name}` |" in table) == (s.scope == scope), (scope, s.name)
            if s.scope == scope:
                assert s.kind.accepted.replace("|", "\\|") in table


def test_the_core_reads_no_environment():
    readers = [str(f.relative_to(ROOT)) for f in (ROOT / "csrc").rglob("*")
               if f.suffix in (".h", ".cc", ".cu", ".cuh") and "getenv" in f.read_text()]
    assert not readers, f"{readers} call getenv: declare the variable in pycomm/settings.py and pass it in"


def test_every_pycomm_name_in_the_sources_is_declared():
    undeclared: dict[str, set[str]] = {}
    for top in SOURCES:
        path = ROOT / top
        files = [path] if path.is_file() else [f for f in path.rglob("*") if f.suffix in (".py", ".sh")]
        for f in files:
            for name in re.findall(r"\bPYCOMM_[A-Z0-9_]*[A-Z0-9]\b", f.read_text(errors="replace")):
                if name not in settings.BY_NAME and name not in NOT_VARIABLES:
                    undeclared.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    assert not undeclared, f"declare these in pycomm/settings.py: {undeclared}"


def test_the_listing_shows_current_values():
    env = {k: v for k, v in worker_env().items() if not k.startswith("PYCOMM_")}
    env.update(PYCOMM_SPIN_US="17")
    p = subprocess.run([sys.executable, "-m", "pycomm.settings_doc"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "PYCOMM_SPIN_US [runtime, handed to the core] = '17' -> 17" in p.stdout, p.stdout
    assert all(f"{s.name} [" in p.stdout for s in settings.SETTINGS), p.stdout
    check = subprocess.run([sys.executable, "-m", "pycomm.settings_doc", "--check-readme"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "match" in check.stdout, check.stdout + check.stderr
