"""A new algorithm, registered from a test module, trains through apps.train on 2 real ranks without
any edit in apps/: the app imports algorithm.module and dispatches on the class's declared traits."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from apps.train import main
from tests.apps import runs


@pytest.mark.mpi
def test_algorithm_registered_outside_the_package_trains_through_apps_train(tmp_path: Path) -> None:
    argv = runs.args(
        tmp_path,
        "signsgd",
        "test-signsgd",
        2,
        "-o",
        "algorithm.module=tests.apps.plugins.signsgd",
        "-o",
        "train.max_steps=20",
        "-o",
        "optim.lr=0.001",
        "-o",
        "optim.momentum=0.0",
    )
    proc = runs.run(argv)
    assert "test-signsgd over 2 rank(s)" in proc.stdout, proc.stdout
    rows = list(csv.DictReader(open(tmp_path / "signsgd" / "train.csv")))
    assert float(rows[-1]["comm_bytes"]) > 0 and float(rows[-1]["loss"]) < float(rows[0]["loss"])
    last = sorted((tmp_path / "signsgd" / "checkpoints").glob("ckpt.step*"))[-1]
    # declared IDENTICAL: one copy of the optimizer state, not one per rank
    assert (last / "optim_state_dict.pt").exists() and not (last / "optim_state_dict.rank1.pt").exists()


def test_unimportable_algorithm_module_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--print-config",
                "--nproc",
                "1",
                "-o",
                "algorithm.name=test-signsgd",
                "-o",
                "algorithm.module=tests.apps.plugins.nowhere",
                "-o",
                "algorithm.options={}",
            ]
        )
        == 2
    )
    assert "algorithm.module: cannot import 'tests.apps.plugins.nowhere'" in capsys.readouterr().err
