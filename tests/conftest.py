from pathlib import Path

import pytest

from tests.launch import have_mpirun
from tests.slurm import slurm, slurm_missing_reason  # noqa: F401  (`slurm`: session fixture)

PARTS = ("ranks", "rest")
CLUSTER = Path(__file__).parent / "cluster"  # its module fixture owns the cluster's addresses: one part only


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        choices=PARTS,
        help="run one part of the suite: 'ranks' (mpi, slurm and emulated-cluster tests, which keep the cores busy) "
        "or 'rest' (the others, which mostly wait on processes and sockets); scripts/test.sh runs both at once",
    )


def starts_ranks(item: pytest.Item) -> bool:
    return "mpi" in item.keywords or "slurm" in item.keywords or CLUSTER in Path(item.path).parents


def pytest_collection_modifyitems(config, items):
    part = config.getoption("--part")
    if part is not None:
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            (kept if starts_ranks(item) == (part == "ranks") else dropped).append(item)
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    skip_mpi = pytest.mark.skip(reason="mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
    slurm_reason = slurm_missing_reason()
    for item in items:
        if "mpi" in item.keywords and not have_mpirun():
            item.add_marker(skip_mpi)
        if "slurm" in item.keywords and slurm_reason:
            item.add_marker(pytest.mark.skip(reason=slurm_reason))
