"""Every layer's PYCOMM_* settings as documentation: a listing with the current values, and
docs/settings.md, whose tables are generated from the registered tables (pycomm/settings.py) and
checked against them by the tests.

    python -m pycomm.settings_doc                      # every setting, its current value, who reads it
    python -m pycomm.settings_doc --markdown pycomm.settings runtime   # one table as markdown
    python -m pycomm.settings_doc --update             # regenerate the tables of docs/settings.md
    python -m pycomm.settings_doc --check              # exit 1 when a table there is out of date

docs/settings.md names each table it shows in its markers (`<!-- settings table MODULE SCOPE ... -->`),
and this module imports those modules (each registers its table when imported): the document says
which layers' tables it gathers, so pycomm itself names no layer above it."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

from pycomm.settings import BUILD, TABLES, Setting, get

ROOT = Path(__file__).resolve().parent.parent
DOC = "docs/settings.md"
UPDATE_COMMAND = "python -m pycomm.settings_doc --update"
FIRST_COLUMN = {BUILD: "switch (environment for `pip install`, `-D` for CMake)"}
BEGIN = "<!-- settings table {table} {scope}: generated from {table} by `" + UPDATE_COMMAND + "` -->"
END = "<!-- end of settings table {table} {scope} -->"
MARKER = re.compile(r"<!-- settings table ([\w.]+) (\w+): generated")
AGREED = " (**the same on every rank**: compared when a communicator is made; a difference is a `SettingError`)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(table: str, scope: str) -> str:
    """The table of the settings of `scope` that `table` declares: variable, accepted values and default,
    effect (agreed settings say so)."""
    rows = [f"| {FIRST_COLUMN.get(scope, 'variable')} | values (default) | effect |", "| --- | --- | --- |"]
    rows += [
        f"| `{s.name}` | {_cell(s.kind.accepted)}; default {_cell(s.default_words)} | "
        f"{_cell(s.doc + (AGREED if s.agreed else ''))} |"
        for s in TABLES[table]
        if s.scope == scope
    ]
    return "\n".join(rows)


def blocks_in(text: str) -> list[tuple[str, str]]:
    """(table, scope) of each generated table a document marks."""
    return MARKER.findall(text)


def load_tables(text: str) -> None:
    """Imports each table module the document names (each registers its table); the checkout's root is on
    sys.path for the tables outside the installed packages (scripts/)."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    for table, _ in blocks_in(text):
        importlib.import_module(table)


def _block(table: str, scope: str) -> str:
    return "\n".join(
        [BEGIN.format(table=table, scope=scope), markdown(table, scope), END.format(table=table, scope=scope)]
    )


def updated(text: str, path: str = DOC) -> str:
    """`text` (docs/settings.md) with every marked table regenerated from its registered table."""
    load_tables(text)
    for table, scope in blocks_in(text):
        pattern = re.compile(
            re.escape(BEGIN.format(table=table, scope=scope))
            + r".*?"
            + re.escape(END.format(table=table, scope=scope)),
            re.DOTALL,
        )
        if not pattern.search(text):
            raise ValueError(
                f"{path}: the table {table} {scope} has no end marker {END.format(table=table, scope=scope)!r}"
            )
        text = pattern.sub(lambda _: _block(table, scope), text, count=1)
    return text


def unshown(text: str) -> list[str]:
    """'table scope' of each registered table's settings that no block of the document shows."""
    shown = set(blocks_in(text))
    return sorted(
        {f"{table} {s.scope}" for table, entries in TABLES.items() for s in entries if (table, s.scope) not in shown}
    )


def problems(root: Path = ROOT) -> list[str]:
    """What is wrong with docs/settings.md under `root`: out of date, or a registered table not shown."""
    text = (root / DOC).read_text()
    new = updated(text)
    found = [f"{DOC} is out of date: run `{UPDATE_COMMAND}`"] if new != text else []
    return found + [
        f"{DOC} shows no table for {what}: add its two markers where it belongs and run `{UPDATE_COMMAND}`"
        for what in unshown(text)
    ]


def update(root: Path = ROOT) -> bool:
    """Rewrites docs/settings.md's tables under `root`; whether it changed."""
    file = root / DOC
    text = file.read_text()
    new = updated(text)
    if new != text:
        tmp = file.with_suffix(".md.tmp")
        tmp.write_text(new)
        tmp.replace(file)
    return new != text


def _current(s: Setting, env: Mapping[str, str]) -> str:
    if s.name not in env:
        return f"unset -> {s.default_words}"
    return s.shown(env[s.name]) if s.secret else f"{env[s.name]!r} -> {get(s.name, env)!r}"


def listing(env: Optional[Mapping[str, str]] = None) -> str:
    """Every registered setting, by table: its current value in `env` (default os.environ), what it
    accepts, who reads it; then the PYCOMM_* variables set that no table declares."""
    env = os.environ if env is None else env
    lines = []
    for table, entries in TABLES.items():
        for s in entries:
            notes = "".join([", handed to the core" if s.core else "", ", agreed" if s.agreed else ""])
            lines += [
                f"{s.name} [{table}, {s.scope}{notes}] = {_current(s, env)}",
                f"    accepts {s.kind.accepted}; read by {s.read_by}",
            ]
    declared = {s.name for entries in TABLES.values() for s in entries}
    lines += [
        f"{name} = {env[name]!r}: declared by no table (ignored)"
        for name in sorted(env)
        if name.startswith("PYCOMM_") and name not in declared
    ]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pycomm.settings_doc", description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group()
    what.add_argument("--markdown", nargs=2, metavar=("TABLE", "SCOPE"), help="print one table as markdown")
    what.add_argument("--update", action="store_true", help=f"regenerate the tables of {DOC}")
    what.add_argument("--check", action="store_true", help=f"exit 1 when {DOC} is out of date")
    args = p.parse_args(argv)
    doc = ROOT / DOC
    if doc.exists():
        load_tables(doc.read_text())
    if args.markdown:
        importlib.import_module(args.markdown[0])
        print(markdown(*args.markdown))
    elif args.update:
        print(f"updated {DOC}" if update() else f"{DOC} was up to date")
    elif args.check:
        found = problems()
        if found:
            print("\n".join(found))
            return 1
        print(f"{DOC} matches the settings tables")
    else:
        print(listing())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
