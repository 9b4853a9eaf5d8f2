"""One rank of benchmarks/startup.py's pycomm case: a user's script, `import torch, pycomm`, `pycomm.init()`,
one all-reduce. Its phases come from PYCOMM_PROFILE_STARTUP (pycomm's own marks, plus the script's)."""

from __future__ import annotations

import time

MAIN_START = time.time()  # before the imports the profile times

import torch  # noqa: E402

TORCH_IMPORTED = time.time()

import pycomm  # noqa: E402
from pycomm import startup_profile  # noqa: E402


def main() -> None:
    startup_profile.mark("main_start", at=MAIN_START)
    startup_profile.mark("torch_imported", at=TORCH_IMPORTED)
    comm = pycomm.init()
    t = torch.ones(1024)
    comm.allreduce(t, op=pycomm.SUM)
    startup_profile.mark("first_allreduce")
    assert startup_profile.enabled(), "run with PYCOMM_PROFILE_STARTUP set"
    assert t[0].item() == comm.size, f"all-reduce of ones gave {t[0].item()}, expected {comm.size}"


if __name__ == "__main__":
    main()
