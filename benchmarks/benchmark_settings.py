"""The benchmarks' table of PYCOMM_* variables, which the tests that share the benchmarks' problems read
too (the registry and the other layers' tables: pycomm/settings.py). Registered when imported."""
from __future__ import annotations

from pycomm import settings
from pycomm.settings import TESTS, Directory, Setting

MNIST_ENV = "PYCOMM_MNIST"

SETTINGS = settings.register(__name__, (
    Setting(MNIST_ENV, Directory("holding MNIST's idx files"), None,
            "where the convergence tests and the algorithm benchmarks find MNIST", "benchmarks/mnist_cnn.py",
            scope=TESTS,
            default_text="../shared/data/mnist beside the checkout"),
))
