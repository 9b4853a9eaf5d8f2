"""Sub-groups of backend "pycomm" (pycomm/torch_backend/groups.py) on 4 real ranks
(tests/comm/workers/torch_backend_groups.py): new_group (all ranks calling it, and members only),
new_subgroups and a 2-D init_device_mesh run on sub-communicators of the world's own transport (MPI_Comm_create_group
under mpirun, the gloo transport under torchrun), with the expected values, mesh dimension names for traces, and
pycomm's MismatchError for a mismatched collective inside a sub-group."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun, torchrun


@pytest.mark.parametrize(
    "launcher,transport",
    [pytest.param(mpirun, "mpi", marks=pytest.mark.mpi), (torchrun, "gloo")],
    ids=["mpirun", "torchrun"],
)
def test_subgroups_are_pycomm_subcommunicators(launcher, transport):
    proc = launcher(
        4,
        "tests.comm.workers.torch_backend_groups",
        env={"PYCOMM_TIMEOUT": "60", "PYTHONWARNINGS": "ignore::FutureWarning"},
    )
    assert sorted(re.findall(rf"rank (\d): groups passed on {transport}", proc.stdout)) == ["0", "1", "2", "3"], (
        proc.stdout
    )
    # (two ranks' lines may run together in torchrun's output; under MPI a small broadcast is matched one way,
    # so the allreduce's rank first hears that its peer refused its op, then which ops differed)
    assert sorted(
        re.findall(
            r"rank (\d): sub-group MismatchError: (?:rank \d refused this rank's \(\d\) op, [^:]*: )?"
            r"ranks submitted different collectives",
            proc.stdout,
        )
    ) == ["0", "1"], proc.stdout
    assert "rank 0 submitted allreduce" in proc.stdout and "rank 1 submitted broadcast" in proc.stdout, proc.stdout
