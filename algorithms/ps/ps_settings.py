"""The parameter servers' table of PYCOMM_* variables: how an independent process (parameter servers,
ssp) learns its rank and its peers' addresses (the registry and the other layers' tables:
pycomm/settings.py). Registered when imported; a malformed value fails the import, naming it."""

from __future__ import annotations

from pycomm import settings
from pycomm.settings import Integer, Pattern, Setting

RANK_ENV, WORLD_ENV, ADDRESS_ENV, ADDRESSES_ENV = (
    "PYCOMM_PS_RANK",
    "PYCOMM_PS_WORLD",
    "PYCOMM_PS_ADDRESS",
    "PYCOMM_PS_ADDRESSES",
)
SECRET_ENV, HOST_ENV = "PYCOMM_PS_SECRET", "PYCOMM_PS_HOST"
SECRET_MIN_CHARS = 32  # 128 bits as hex: a secret an attacker cannot guess (secrets.token_hex(32) gives 64)

SETTINGS = settings.register(
    __name__,
    (
        Setting(
            RANK_ENV,
            Integer(0, (1 << 31) - 1, "rank"),
            None,
            "set by the launch of independent processes (parameter servers, ssp): this process's rank, servers "
            "first; with it set, `--nproc` does not launch again",
            "algorithms.ps.layout, apps.launch",
            default_text="not an independent process",
        ),
        Setting(
            WORLD_ENV,
            Integer(1, (1 << 31) - 1, "processes"),
            None,
            "with `PYCOMM_PS_RANK`: the number of independent processes",
            "algorithms.ps.layout",
        ),
        Setting(
            ADDRESS_ENV,
            Pattern(r"[^\s,]+:\d+", "HOST:PORT", lambda m: m.group(0)),
            None,
            "with `PYCOMM_PS_RANK`: HOST:PORT of rank 0; rank r listens on PORT + r",
            "algorithms.ps.layout",
        ),
        Setting(
            ADDRESSES_ENV,
            Pattern(
                r"[^\s,]+:\d+(,[^\s,]+:\d+)*",
                "HOST:PORT,HOST:PORT,... (one per rank)",
                lambda m: tuple(m.group(0).split(",")),
            ),
            None,
            "with `PYCOMM_PS_RANK`, instead of `PYCOMM_PS_ADDRESS`: every rank's HOST:PORT (several machines)",
            "algorithms.ps.layout",
        ),
        Setting(
            SECRET_ENV,
            Pattern(
                rf"\S{{{SECRET_MIN_CHARS},}}",
                f"at least {SECRET_MIN_CHARS} characters without "
                "spaces (e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`)",
                lambda m: m.group(0),
            ),
            None,
            "the run's secret: every message between its ranks is signed with it (HMAC-SHA256) and one without "
            "it is dropped; required with `PYCOMM_PS_RANK` (`--nproc` makes one per launch; under mpirun rank 0 "
            "makes one and hands it over the communicator unless this is set); pass it in the environment, "
            "never on a command line (docs/security.md)",
            "algorithms.ps.layout, apps.launch, apps.ps",
            default_text="none (under mpirun: made by rank 0)",
            secret=True,
        ),
        Setting(
            HOST_ENV,
            Pattern(r"[^\s,:]+", "a host name or IP address of this machine", lambda m: m.group(0)),
            None,
            "under mpirun: the interface a parameter-server or ssp rank listens on (its peers connect there)",
            "algorithms.ps.layout",
            default_text="loopback when every rank is on this host, else the address of this host's name",
        ),
    ),
)
