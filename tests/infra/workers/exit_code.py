"""Exits with the given code on one task (and 0 on the others): the launcher must report failure."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    failing_task, code = int(sys.argv[1]), int(sys.argv[2])
    if int(os.environ["SLURM_PROCID"]) == failing_task:
        print(f"task {failing_task} failing on purpose", flush=True)
        sys.exit(code)
