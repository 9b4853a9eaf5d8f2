"""The command a user started, for usage lines and messages: a console script's own name (`pycomm-train`,
installed by `pip install .`) when it was started by it, else `python -m <module>`."""

from __future__ import annotations

import sys
from pathlib import Path


def command_name(module: str, script: str) -> str:
    return script if Path(sys.argv[0]).name == script else f"python -m {module}"
