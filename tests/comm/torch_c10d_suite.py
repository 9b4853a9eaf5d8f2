"""torch's own backend-generic c10d tests (torch/testing/_internal/distributed/distributed_test.py's
_DistTestBase, the tests torch runs for gloo and nccl) against backend "pycomm": each test spawns WORLD_SIZE
processes (torch.multiprocessing) that call init_process_group("pycomm", init_method="file://...", rank=,
world_size=), so pycomm runs on its gloo transport over torch's store. Not collected by the suite (a test_
prefix would pull in hundreds of multi-process tests); run a selection by hand, e.g.

    python3 -m pytest -p no:cacheprovider tests/comm/torch_c10d_suite.py -k "all_reduce_sum or barrier"

docs/port_ddp.md lists which pass and which fail, and why."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("BACKEND", "pycomm")  # read when torch's test module is imported
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="pycomm_c10d_"))

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

import pycomm  # noqa: E402,F401  (registers the backend, in the spawned processes too)

# what the backend has and lacks, declared as torch's tests read it (before their skips are decided)
DistTestCases.backend_feature["ddp"].add("pycomm")
DistTestCases.backend_feature["subgroup"].add("pycomm")
DistTestCases.skip_collective["reduce"].add("pycomm")
DistTestCases.skip_collective["sendrecv anysource"].add("pycomm")
DistTestCases.skip_collective["allgather_coalesced"].add("pycomm")

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestPycommBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()
