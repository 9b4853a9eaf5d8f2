"""docs/settings.md's tables of PYCOMM_* variables are generated from every layer's table and must match
them; every table in the tree is shown there, each layer's variables are declared in its own table,
and no other place reads them (the C++ core reads no environment at all, and every PYCOMM_* name in
the Python sources and scripts is declared)."""

from __future__ import annotations

import re
import subprocess
import sys

from pycomm import settings, settings_doc
from tests.launch import ROOT, worker_env

DOC_TEXT = (ROOT / settings_doc.DOC).read_text()
settings_doc.load_tables(DOC_TEXT)
# Names that look like settings but are not environment variables: CMake cache variables passed with
# -D by tests/infra/test_gpu_choice.py, a shell variable of scripts/lib.sh, and the deliberate
# misspellings of tests/comm/test_settings.py.
NOT_VARIABLES = {
    "PYCOMM_NVCC",
    "PYCOMM_HIPCC",
    "PYCOMM_ROOT",
    "PYCOMM_TIMOUT",
    "PYCOMM_INLINE_BYTE",
    "PYCOMM_NUMTHREADS",
    "PYCOMM_APPS_FAILAT",
    "PYCOMM_SOMEWHERE_AGREED",
    "PYCOMM_NOT_DECLARED_ANYWHERE",
}
SOURCES = ("pycomm", "apps", "algorithms", "benchmarks", "tests", "scripts", "setup.py", ".ci/run", "Makefile")
LAYERS_WITH_TABLES = ("pycomm", "apps", "algorithms", "benchmarks", "scripts")  # tests declare no variable
# pycomm's table holds pycomm's run-time variables and build switches; a layer above declares its own
OWN_SCOPES = {settings.RUNTIME, settings.BUILD}


def test_the_document_matches_the_tables_and_shows_each_of_them():
    found = settings_doc.problems(ROOT)
    assert not found, "\n".join(found)


def test_every_table_in_the_tree_is_gathered_by_the_document():
    """A table registers where its module is imported; the document must name each, or its variables
    would be missing from the documentation (and from the checks below)."""
    tables = {
        ".".join(f.relative_to(ROOT).with_suffix("").parts)
        for top in LAYERS_WITH_TABLES
        for f in (ROOT / top).rglob("*.py")
        if "settings.register(__name__" in f.read_text()
    }
    tables.add(settings.TABLE)
    assert tables <= {table for table, _ in settings_doc.blocks_in(DOC_TEXT)}, tables


def test_pycomm_declares_only_its_own_variables():
    others = [s.name for s in settings.SETTINGS if s.scope not in OWN_SCOPES]
    assert not others, (
        f"{others} belong to a layer above pycomm: declare them in that layer's table "
        "(apps/apps_settings.py, algorithms/ps/ps_settings.py, benchmarks/benchmark_settings.py, "
        "scripts/script_settings.py) and show it in docs/settings.md"
    )


def test_a_hand_edited_table_is_noticed_and_regenerated():
    row = next(line for line in DOC_TEXT.splitlines() if line.startswith("| `PYCOMM_SPIN_US` |"))
    edited = DOC_TEXT.replace(row, row.replace("250", "100"))
    assert edited != DOC_TEXT
    assert settings_doc.updated(edited) == DOC_TEXT
    assert settings_doc.unshown("no tables here") == sorted(
        {f"{table} {s.scope}" for table, entries in settings.TABLES.items() for s in entries}
    )


def test_tables_hold_every_setting_of_their_scope_with_its_accepted_values():
    for table, scope in settings_doc.blocks_in(DOC_TEXT):
        markdown = settings_doc.markdown(table, scope)
        for s in settings.TABLES[table]:
            assert (f"| `{s.name}` |" in markdown) == (s.scope == scope), (table, scope, s.name)
            if s.scope == scope:
                assert s.kind.accepted.replace("|", "\\|") in markdown
                assert (
                    "**the same on every rank**" in markdown.split(f"| `{s.name}` |")[1].split("\n")[0]
                ) == s.agreed, s.name


def test_the_core_reads_no_environment():
    readers = [
        str(f.relative_to(ROOT))
        for f in (ROOT / "csrc").rglob("*")
        if f.suffix in (".h", ".cc", ".cu", ".cuh") and "getenv" in f.read_text()
    ]
    assert not readers, f"{readers} call getenv: declare the variable in a settings table and pass it in"


def test_every_pycomm_name_in_the_sources_is_declared():
    undeclared: dict[str, set[str]] = {}
    for top in SOURCES:
        path = ROOT / top
        files = [path] if path.is_file() else [f for f in path.rglob("*") if f.suffix in (".py", ".sh")]
        for f in files:
            for name in re.findall(r"\bPYCOMM_[A-Z0-9_]*[A-Z0-9]\b", f.read_text(errors="replace")):
                if name not in settings.BY_NAME and name not in NOT_VARIABLES:
                    undeclared.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    assert not undeclared, f"declare these in their layer's settings table: {undeclared}"


def test_the_listing_shows_current_values_and_the_check_passes():
    env = {k: v for k, v in worker_env().items() if not k.startswith("PYCOMM_")}
    secret = "0123456789abcdef" * 4
    env.update(PYCOMM_SPIN_US="17", PYCOMM_NOT_DECLARED_ANYWHERE="x", PYCOMM_PS_SECRET=secret)
    p = subprocess.run(
        [sys.executable, "-m", "pycomm.settings_doc"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    assert "PYCOMM_SPIN_US [pycomm.settings, runtime, handed to the core] = '17' -> 17" in p.stdout, p.stdout
    assert "PYCOMM_INLINE_BYTES [pycomm.settings, runtime, handed to the core, agreed]" in p.stdout, p.stdout
    assert "PYCOMM_NOT_DECLARED_ANYWHERE = 'x': declared by no table (ignored)" in p.stdout, p.stdout
    assert "PYCOMM_PS_SECRET [" in p.stdout and "= <hidden, 64 characters>" in p.stdout, p.stdout
    assert secret not in p.stdout + p.stderr  # a secret's value is never listed
    assert all(f"{s.name} [" in p.stdout for s in settings.BY_NAME.values()), p.stdout
    check = subprocess.run(
        [sys.executable, "-m", "pycomm.settings_doc", "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0 and "matches" in check.stdout, check.stdout + check.stderr
