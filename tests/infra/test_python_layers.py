"""The Python layers point one way (docs/architecture.md, "Layers"): pycomm < algorithms < apps < benchmarks, each
importing only those before it; tests may import anything, and nothing imports tests (a module run as
`python -m tests.x` counts as an import). Every top-level folder holding Python must be placed below,
so the direction is decided when the folder is made, not later. Read from the sources (ast), so
imports inside functions count too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("pycomm", "algorithms", "apps", "benchmarks")  # each may import the ones before it
TESTS = "tests"  # may import anything; nothing imports it
CLIENTS = {"scripts", "examples", "docs", "setup.py"}  # programs on top: may import any layer, not tests
NOT_SOURCES = {"build", "dist", "node_modules", "__pycache__"}
TESTS_MODULE = re.compile(r"tests(\.[A-Za-z_]\w*)+")  # a module of tests named in a string (`-m tests.x`)


def _sources(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*.py")
        if not any(part in NOT_SOURCES or part.startswith(".") for part in p.relative_to(root).parts)
    )


def _absolute(node: ast.ImportFrom, rel: Path) -> str:
    """The module a `from ... import` names, its relative dots resolved against the file's package."""
    if node.level == 0:
        return node.module or ""
    package = list(rel.parent.parts)
    base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else []))


def imported(path: Path, rel: Path, names: bool = False) -> list[tuple[int, str]]:
    """(line, module) for each import of the file, importlib/__import__ calls on constants included, and
    each string that names a module of tests. With `names`, `from m import a, b` gives m.a and m.b (either
    may be a submodule), so a caller resolving them to files sees `from pkg import mod` reach mod."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(errors="replace"), str(rel))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, rel)
            found += [(node.lineno, f"{module}.{a.name}") for a in node.names] if names else [(node.lineno, module)]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
        ):
            found.append((node.lineno, node.args[0].value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and TESTS_MODULE.fullmatch(node.value):
            found.append((node.lineno, node.value))
    return found


def layer_violations(root: Path) -> list[str]:
    """'file:line: imports x (why not)' for each import against the direction, and each top-level folder
    with Python that has no place in it."""
    bad = []
    for path in _sources(root):
        rel = path.relative_to(root)
        top = rel.parts[0] if len(rel.parts) > 1 else rel.name
        if top not in LAYERS and top != TESTS and top not in CLIENTS:
            bad.append(f"{rel}: {top}/ is not placed in {Path(__file__).name}; add it to LAYERS or CLIENTS")
            continue
        if top == TESTS:
            continue
        for line, module in imported(path, rel):
            target = module.split(".")[0]
            if target == TESTS:
                bad.append(
                    f"{rel}:{line}: imports {module} (nothing imports tests: move what it shares to the "
                    "lowest layer that uses it)"
                )
            elif top in LAYERS and target in LAYERS and LAYERS.index(target) > LAYERS.index(top):
                allowed = ", ".join(LAYERS[: LAYERS.index(top)]) or "no other layer"
                bad.append(f"{rel}:{line}: imports {module} ({top} may import {allowed})")
    return bad


def test_imports_point_down_the_layers_and_nothing_imports_tests():
    bad = layer_violations(ROOT)
    assert not bad, "imports against the layers' direction:\n" + "\n".join(bad)


def test_the_check_catches_each_kind_of_violation(tmp_path):
    """The check itself can fail: upward imports (plain, from, relative, inside a function, through
    importlib), a module of tests run by name, and a folder with no place are each named."""
    files = {
        "pycomm/core.py": "import torch\nfrom pycomm import ops\n\ndef f():\n    import apps.train\n",
        "algorithms/x/y.py": "from ...apps import config\nfrom ..z import w\n",
        "apps/run.py": "import importlib\nimportlib.import_module('benchmarks.harness')\nimport algorithms\n",
        "benchmarks/b.py": "from tests.launch import mpirun\nARGV = ['-m', 'tests.comm.workers.x']\nimport apps\n",
        "tests/t.py": "import benchmarks.b\nfrom tests import launch\n",
        "scripts/s.py": "import apps, pycomm\n",
        "examples/e.py": "import algorithms, apps, pycomm\nfrom tests.launch import mpirun\n",
        "tools/u.py": "import pycomm\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert layer_violations(tmp_path) == [
        "algorithms/x/y.py:1: imports apps (algorithms may import pycomm)",
        "apps/run.py:2: imports benchmarks.harness (apps may import pycomm, algorithms)",
        "benchmarks/b.py:1: imports tests.launch (nothing imports tests: move what it shares to the lowest layer "
        "that uses it)",
        "benchmarks/b.py:2: imports tests.comm.workers.x (nothing imports tests: move what it shares to the lowest "
        "layer that uses it)",
        "examples/e.py:2: imports tests.launch (nothing imports tests: move what it shares to the lowest layer "
        "that uses it)",
        "pycomm/core.py:5: imports apps.train (pycomm may import no other layer)",
        f"tools/u.py: tools/ is not placed in {Path(__file__).name}; add it to LAYERS or CLIENTS",
    ]
