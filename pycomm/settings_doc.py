"""The settings of pycomm/settings.py as documentation: a listing with the current values, and the
README tables, which are generated from the declarations and checked against them by the tests.

    python -m pycomm.settings_doc                     # every setting, its current value, who reads it
    python -m pycomm.settings_doc --markdown runtime  # a README table (runtime, apps, build)
    python -m pycomm.settings_doc --update-readme     # rewrite the tables in README.md, apps/README.md
    python -m pycomm.settings_doc --check-readme      # exit 1 when a README table is out of date"""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Mapping, Optional, Sequence

from pycomm.settings import APPS, BUILD, RUNTIME, SETTINGS, Setting, get

ROOT = Path(__file__).resolve().parent.parent
UPDATE_COMMAND = "python -m pycomm.settings_doc --update-readme"
# which README holds which tables, between the markers below
README_TABLES: dict[str, tuple[str, ...]] = {"README.md": (RUNTIME, BUILD), "apps/README.md": (APPS,)}
FIRST_COLUMN = {RUNTIME: "variable", APPS: "variable", BUILD: "switch (environment for `pip install`, `-D` for CMake)"}
BEGIN = "<!-- settings table {scope}: generated from pycomm/settings.py by `" + UPDATE_COMMAND + "` -->"
END = "<!-- end of settings table {scope} -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(scope: str) -> str:
    """The README table of the settings of `scope`: variable, accepted values and default, effect."""
    rows = [f"| {FIRST_COLUMN[scope]} | values (default) | effect |", "| --- | --- | --- |"]
    rows += [f"| `{s.name}` | {_cell(s.kind.accepted)}; default {_cell(s.default_words)} | {_cell(s.doc)} |"
             for s in SETTINGS if s.scope == scope]
    return "\n".join(rows)


def _block(scope: str) -> str:
    return "\n".join([BEGIN.format(scope=scope), markdown(scope), END.format(scope=scope)])


def _block_pattern(scope: str) -> re.Pattern[str]:
    return re.compile(re.escape(BEGIN.format(scope=scope)) + r".*?" + re.escape(END.format(scope=scope)), re.DOTALL)


def updated(text: str, scopes: Sequence[str], path: str) -> str:
    """`text` (a README) with the tables of `scopes` regenerated; each must be marked there already."""
    for scope in scopes:
        pattern = _block_pattern(scope)
        if not pattern.search(text):
            raise ValueError(f"{path} has no settings table {scope!r}: put the two lines\n{BEGIN.format(scope=scope)}\n"
                             f"{END.format(scope=scope)}\nwhere it belongs and run `{UPDATE_COMMAND}`")
        text = pattern.sub(lambda _: _block(scope), text, count=1)
    return text


def stale_readmes(root: Path = ROOT) -> list[str]:
    """The READMEs under `root` whose settings tables differ from pycomm/settings.py."""
    stale = []
    for path, scopes in README_TABLES.items():
        text = (root / path).read_text()
        try:
            if updated(text, scopes, path) != text:
                stale.append(path)
        except ValueError as e:
            stale.append(f"{path} ({e})")
    return stale


def update_readmes(root: Path = ROOT) -> list[str]:
    """Rewrites the stale README tables under `root`; returns the files it changed."""
    changed = []
    for path, scopes in README_TABLES.items():
        file = root / path
        text = file.read_text()
        new = updated(text, scopes, path)
        if new != text:
            tmp = file.with_suffix(file.suffix + ".tmp")
            tmp.write_text(new)
            tmp.replace(file)
            changed.append(path)
    return changed


def _current(s: Setting, env: Mapping[str, str]) -> str:
    return f"{env[s.name]!r} -> {get(s.name, env)!r}" if s.name in env else f"unset -> {s.default_words}"


def listing(env: Optional[Mapping[str, str]] = None) -> str:
    """Every setting, by scope: its current value in `env` (default os.environ), what it accepts, who reads it."""
    env = os.environ if env is None else env
    lines = []
    for s in SETTINGS:
        core = ", handed to the core" if s.core else ""
        lines += [f"{s.name} [{s.scope}{core}] = {_current(s, env)}",
                  f"    accepts {s.kind.accepted}; read by {s.read_by}"]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pycomm.settings_doc", description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group()
    what.add_argument("--markdown", choices=(RUNTIME, APPS, BUILD), help="print the README table of these settings")
    what.add_argument("--update-readme", action="store_true", help="regenerate the tables of the READMEs")
    what.add_argument("--check-readme", action="store_true", help="exit 1 when a README table is out of date")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(args.markdown))
    elif args.update_readme:
        changed = update_readmes()
        print("updated " + ", ".join(changed) if changed else "the README tables were up to date")
    elif args.check_readme:
        stale = stale_readmes()
        if stale:
            print(f"out of date: {', '.join(stale)}; run `{UPDATE_COMMAND}`")
            return 1
        print("the README tables match pycomm/settings.py")
    else:
        print(listing())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
