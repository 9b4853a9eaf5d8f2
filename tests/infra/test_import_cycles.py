"""No import circle inside a layer: within pycomm/, algorithms/, apps/ and benchmarks/ the modules import
each other as a tree, so each can be read (and loaded) after the ones it needs. Imports inside functions
count: they hide a circle from the interpreter, not from the reader. The layers and the import reading
are test_python_layers.py's, so both tests see the same graph."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.infra.test_python_layers import LAYERS, ROOT, _sources, imported


def _module_of(rel: Path) -> str:
    parts = rel.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lines_of_no_circle(path: Path) -> set[int]:
    """The lines inside `if TYPE_CHECKING:` (imports for annotations, never run) and `if __name__ ==
    "__main__":` (run as __main__, a module apart from the one its importers load): no circle there."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(errors="replace"))):
        test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
        if "TYPE_CHECKING" in test or test.replace("'", '"') == '__name__ == "__main__"':
            lines.update(range(node.body[0].lineno, node.body[-1].end_lineno + 1))
    return lines


def import_graph(root: Path, layer: str) -> dict[str, dict[str, int]]:
    """module -> {module of the same layer it imports: the first line that does}. An import names the
    longest module it reaches (`from pkg import mod` reaches pkg.mod when that is a file, else pkg); a
    compiled module (pkg/_C*.so) is a module too, one that imports nothing."""
    base = root / layer
    files = {_module_of(p.relative_to(root)): p for p in _sources(base)} if base.is_dir() else {}
    compiled = (
        {
            _module_of(p.relative_to(root).with_name(p.name.split(".")[0] + ".py"))
            for pattern in ("*.so", "*.pyd")
            for p in base.rglob(pattern)
        }
        if base.is_dir()
        else set()
    )
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for module, path in files.items():
        not_circles = _lines_of_no_circle(path)
        for line, name in imported(path, path.relative_to(root), names=True):
            if line in not_circles:
                continue
            parts = name.split(".")
            target = next(
                (
                    ".".join(parts[:n])
                    for n in range(len(parts), 0, -1)
                    if ".".join(parts[:n]) in files.keys() | compiled
                ),
                None,
            )
            if target in files and target != module:
                graph[module].setdefault(target, line)
    return graph


def _cycle_through(graph: dict[str, dict[str, int]], start: str, among: set[str]) -> list[str]:
    """A shortest path start -> ... -> start inside `among` (a strongly connected set, so one exists)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                if nxt in among and nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is on no cycle inside {sorted(among)}")


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:  # recursion depth is bounded by a layer's module count
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def cycle_report(root: Path) -> list[str]:
    """One line per circle: its modules, then one cycle through them with the line of each import."""
    report = []
    for layer in LAYERS:
        graph = import_graph(root, layer)
        for members in circles(graph):
            cycle = _cycle_through(graph, members[0], set(members))
            steps = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"
            report.append(f"{layer}: {len(members)} modules in a circle ({', '.join(members)}): {steps}")
    return report


def test_no_import_circle_inside_a_layer():
    report = cycle_report(ROOT)
    assert not report, "import circles (move what both sides need into a module of its own):\n" + "\n".join(report)


def test_the_check_finds_circles_of_every_kind(tmp_path):
    """The check itself can fail: a circle closed by an import inside a function, by `from pkg import mod`
    and by a relative import is found and named; an import of another layer, of a compiled module, for
    annotations only (TYPE_CHECKING), under `if __name__ == "__main__"`, or of a name from a module that imports nothing back, is not a
    circle."""
    files = {
        "pycomm/__init__.py": "from . import a\n",
        "pycomm/_C.cpython-311-x86_64-linux-gnu.so": "",
        "pycomm/_build.py": "def core():\n    from pycomm import _C\n",
        "pycomm/a.py": "from pycomm import b, e\n",
        "pycomm/b.py": "import os\n\ndef f():\n    from pycomm.c import thing\n",
        "pycomm/c.py": "from .a import x\nimport apps.run\n",
        "pycomm/d.py": "from pycomm.a import x\n",
        "pycomm/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pycomm.a import x\n",
        "apps/__init__.py": "",
        "apps/run.py": "import pycomm.d\nfrom apps.sub import helper\n",
        "apps/sub/__init__.py": "",
        "apps/sub/helper.py": "import apps.run\n",
        "apps/cli.py": "import apps.tool\n",
        "apps/tool.py": "if __name__ == '__main__':\n    from apps.cli import main\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cycle_report(tmp_path) == [
        "pycomm: 3 modules in a circle (pycomm.a, pycomm.b, pycomm.c): "
        "pycomm.a (line 1) -> pycomm.b (line 4) -> pycomm.c (line 1) -> pycomm.a",
        "apps: 2 modules in a circle (apps.run, apps.sub.helper): "
        "apps.run (line 2) -> apps.sub.helper (line 1) -> apps.run",
    ]
