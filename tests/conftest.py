import pytest

from tests.launch import have_mpirun
from tests.slurm import slurm, slurm_missing_reason  # noqa: F401  (`slurm`: session fixture)


def pytest_collection_modifyitems(config, items):
    skip_mpi = pytest.mark.skip(reason="mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
    slurm_reason = slurm_missing_reason()
    for item in items:
        if "mpi" in item.keywords and not have_mpirun():
            item.add_marker(skip_mpi)
        if "slurm" in item.keywords and slurm_reason:
            item.add_marker(pytest.mark.skip(reason=slurm_reason))
