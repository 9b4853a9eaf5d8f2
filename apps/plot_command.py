"""The `pycomm-plot` command: apps.plot's main, with a missing matplotlib reported as one line and exit 2
(apps.plot imports matplotlib when it is imported, before its main could catch anything)."""

from __future__ import annotations

import sys

from apps.requirements import MissingDependencyError


def main(argv: list[str] | None = None) -> int:
    try:
        from apps import plot
    except MissingDependencyError as e:
        print(f"pycomm-plot: {e}", file=sys.stderr)
        return 2
    return plot.main(argv)


if __name__ == "__main__":
    sys.exit(main())
