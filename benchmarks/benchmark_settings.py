"""The benchmarks' table of PYCOMM_* variables, which the tests that share the benchmarks' problems read
too, and the tests' own switches (tests declare no table: nothing imports them); the registry and the
other layers' tables: pycomm/settings.py. Registered when imported."""

from __future__ import annotations

from pycomm import settings
from pycomm.settings import TESTS, Directory, Flag, Setting

MNIST_ENV = "PYCOMM_MNIST"
FAULT_MATRIX_ENV = "PYCOMM_FAULT_MATRIX"

SETTINGS = settings.register(
    __name__,
    (
        Setting(
            MNIST_ENV,
            Directory("holding MNIST's idx files"),
            None,
            "where the convergence tests and the algorithm benchmarks find MNIST",
            "benchmarks/mnist_cnn.py",
            scope=TESTS,
            default_text="../shared/data/mnist beside the checkout",
        ),
        Setting(
            FAULT_MATRIX_ENV,
            Flag(),
            False,
            "`1`: tests/apps/test_fault_matrix.py runs every cell of the fault matrix (every algorithm x SIGTERM, "
            "kill -9 of a worker, kill -9 of a server); `0`: the cells CI runs, one or two per class of algorithm",
            "tests/apps/test_fault_matrix.py",
            scope=TESTS,
        ),
    ),
)
