"""The parameter servers' table of PYCOMM_* variables: how an independent process (parameter servers,
ssp) learns its rank and its peers' addresses (the registry and the other layers' tables:
pycomm/settings.py). Registered when imported; a malformed value fails the import, naming it."""
from __future__ import annotations

from pycomm import settings
from pycomm.settings import Integer, Pattern, Setting

RANK_ENV, WORLD_ENV, ADDRESS_ENV, ADDRESSES_ENV = ("PYCOMM_PS_RANK", "PYCOMM_PS_WORLD", "PYCOMM_PS_ADDRESS",
                                                   "PYCOMM_PS_ADDRESSES")

SETTINGS = settings.register(__name__, (
    Setting(RANK_ENV, Integer(0, (1 << 31) - 1, "rank"), None,
            "set by the launch of independent processes (parameter servers, ssp): this process's rank, servers "
            "first; with it set, `--nproc` does not launch again",
            "algorithms.ps.layout, apps.launch", default_text="not an independent process"),
    Setting(WORLD_ENV, Integer(1, (1 << 31) - 1, "processes"), None,
            "with `PYCOMM_PS_RANK`: the number of independent processes", "algorithms.ps.layout"),
    Setting(ADDRESS_ENV, Pattern(r"[^\s,]+:\d+", "HOST:PORT", lambda m: m.group(0)), None,
            "with `PYCOMM_PS_RANK`: HOST:PORT of rank 0; rank r listens on PORT + r", "algorithms.ps.layout"),
    Setting(ADDRESSES_ENV, Pattern(r"[^\s,]+:\d+(,[^\s,]+:\d+)*", "HOST:PORT,HOST:PORT,... (one per rank)",
                                   lambda m: tuple(m.group(0).split(","))), None,
            "with `PYCOMM_PS_RANK`, instead of `PYCOMM_PS_ADDRESS`: every rank's HOST:PORT (several machines)",
            "algorithms.ps.layout"),
))
