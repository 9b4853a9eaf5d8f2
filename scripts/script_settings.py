"""The set-up scripts' table of PYCOMM_* variables (scripts/lib.sh reads them; the registry and the other
layers' tables: pycomm/settings.py). Documentation only: the shell scripts read them, nothing here
validates them (scope "scripts")."""

from __future__ import annotations

from pycomm import settings
from pycomm.settings import SCRIPTS, Flag, Setting

SETTINGS = settings.register(
    __name__,
    (
        Setting(
            "PYCOMM_APT_UPDATED",
            Flag(),
            False,
            "set by scripts/lib.sh once `apt-get update` ran, so that the scripts it starts skip it",
            "scripts/lib.sh",
            scope=SCRIPTS,
        ),
    ),
)
