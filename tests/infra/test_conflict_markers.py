"""No tracked file holds a merge's conflict markers: a merge committed with them once left both sides of a
section in docs/performance_notes.md, and nothing else fails on prose. Tests its own checker."""

from __future__ import annotations

import re
from pathlib import Path

from tests.infra.test_self_contained import ROOT, tracked_files

# Built from pieces so that this file does not hold what it forbids.
MARKER = re.compile("^(" + "<" * 7 + "|" + ">" * 7 + r")( |$)")


def conflict_markers(root: Path, files: list[Path]) -> list[str]:
    """'file:line: text' for every line that opens or closes a conflict."""
    found = []
    for path in files:
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary: no lines to read
            continue
        for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if MARKER.match(line):
                found.append(f"{path.relative_to(root)}:{number}: {line[:80]}")
    return found


def test_no_tracked_file_holds_conflict_markers():
    bad = conflict_markers(ROOT, tracked_files(ROOT))
    assert not bad, "a merge left its conflict markers; keep one side (or both, edited) and drop them:\n" + "\n".join(
        bad
    )


def test_the_check_catches_both_markers(tmp_path):
    opened, closed = "<" * 7 + " HEAD", ">" * 7 + " wip-branch"
    (tmp_path / "a.md").write_text(f"# Title\n{opened}\nours\n=======\ntheirs\n{closed}\n")
    (tmp_path / "fine.md").write_text("Title\n=======\n\n`a <<<<<<< b` inside a line, and >>> quotes\n")
    assert conflict_markers(tmp_path, sorted(tmp_path.iterdir())) == [f"a.md:2: {opened}", f"a.md:6: {closed}"]
