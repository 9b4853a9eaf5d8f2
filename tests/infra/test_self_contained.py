"""The repository stands on its own: no tracked file sends its reader to a document that is not in the
checkout (the design notes and rule lists it grew from; their content lives in docs/architecture.md and
docs/algorithms.md) or to "issue N" of a tracker the reader does not have. A comment says why the code is
as it is today. Tests its own checker, so a pattern that silently matches nothing cannot pass."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Built from pieces so that this file does not name what it forbids (it is excluded below anyway).
OUTSIDE_DOCS = ("DESIGN" + ".md", "ALGORITHMS" + ".md")
# The documents by their exact names (docs/algorithms.md is ours), "issue 14", "Issue 16's", "issues 13, 36".
FORBIDDEN = re.compile(
    r"\b(?-i:" + "|".join(re.escape(d) for d in OUTSIDE_DOCS) + r")"
    r"|\bissues? #?\d+",
    re.IGNORECASE,
)
NOT_SOURCES = {"build", "dist", "node_modules", "__pycache__"}


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under root; where root is not a git checkout (a source tarball), every file
    outside build outputs and hidden folders."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True)
    if listed.returncode == 0 and listed.stdout:
        return [root / name for name in listed.stdout.decode().split("\0") if name]
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part in NOT_SOURCES or part.startswith(".") for part in p.relative_to(root).parts)
    )


def outside_references(root: Path, files: list[Path], exclude: Path | None = None) -> list[str]:
    """'file:line: text' for every line that names a document outside the repository or an issue number."""
    found = []
    for path in files:
        if path == exclude or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary (images, compiled modules): no prose to read
            continue
        for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:160]}")
    return found


def test_no_tracked_file_points_outside_the_repository():
    bad = outside_references(ROOT, tracked_files(ROOT), exclude=Path(__file__).resolve())
    assert not bad, (
        "these lines send the reader to what the repository does not hold; put the rule in "
        "docs/architecture.md or docs/algorithms.md and say why the code is as it is today:\n" + "\n".join(bad)
    )


def test_the_check_catches_each_kind_of_reference(tmp_path):
    files = {
        "a.py": "# see ../shared/" + OUTSIDE_DOCS[0] + ", section 2\nx = 1\n",
        "b.md": "Rules: " + OUTSIDE_DOCS[1] + "\n\nthe default before Issue 14.\n",
        "c.py": '"""Goal (issues 12 and 32): fast."""\n# issue #7\n',
        "fine.py": "# allreduce #12 4096B; see docs/algorithms.md; the issue of a ticket\nissue = 3\n",
        "blob.bin": "\0issue 1",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert outside_references(tmp_path, sorted(tmp_path.iterdir())) == [
        "a.py:1: # see ../shared/" + OUTSIDE_DOCS[0] + ", section 2",
        "b.md:1: Rules: " + OUTSIDE_DOCS[1],
        "b.md:3: the default before Issue 14.",
        'c.py:1: """Goal (issues 12 and 32): fast."""',
        "c.py:2: # issue #7",
    ]
