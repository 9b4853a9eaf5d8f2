"""One rank of benchmarks/startup.py's torch.distributed peer under torchrun: `import torch`,
init_process_group("gloo"), one all_reduce. Timed here, written to PYCOMM_PROFILE_STARTUP's file afterwards."""

from __future__ import annotations

import time

MAIN_START = time.time()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TORCH_IMPORTED = time.time()


def main() -> None:
    dist.init_process_group("gloo")
    initialised = time.time()
    t = torch.ones(1024)
    dist.all_reduce(t)
    done = time.time()
    assert t[0].item() == dist.get_world_size(), f"all_reduce of ones gave {t[0].item()}"
    dist.destroy_process_group()
    from benchmarks.workers.startup_marks import record

    record(
        [
            ("main_start", MAIN_START),
            ("torch_imported", TORCH_IMPORTED),
            ("init", initialised),
            ("first_allreduce", done),
        ]
    )


if __name__ == "__main__":
    main()
