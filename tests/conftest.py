import pytest

from tests.launch import have_mpirun


def pytest_collection_modifyitems(config, items):
    skip_mpi = pytest.mark.skip(reason="mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
    for item in items:
        if "mpi" in item.keywords and not have_mpirun():
            item.add_marker(skip_mpi)
