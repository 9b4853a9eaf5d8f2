"""A run that diverges is never reported as done: a non-finite option value is refused before launch,
naming the key; a loss (or parameters) gone inf / nan stops the run naming the step, with its own exit
code (failure.EXIT_NONFINITE); train.allow_nonfinite=true trains on as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from apps import failure
from apps.config import loading
from apps.config.loading import ConfigError
from apps.nonfinite import NonFiniteError, check_parameters
from tests.apps import runs
from tests.apps.test_failures import last_line
from tests.apps.test_train_multi import needs_comm

# DiLoCo with an outer step so large that the first outer step leaves parameters at inf: the loss after it is nan
DIVERGING = (
    "-o",
    "algorithm.options={inner_steps: 2, outer_lr: 1.0e+30}",
    "-o",
    "train.max_steps=8",
    "-o",
    "train.log_every=1",
)


@pytest.mark.parametrize(
    "override, key, value",
    [
        ("algorithm.options.outer_lr=.inf", "algorithm.options.outer_lr", "inf"),
        ("algorithm.options={outer_lr: .nan}", "algorithm.options.outer_lr", "nan"),
        ("model.options={dropout: -.inf}", "model.options.dropout", "-inf"),
        ("data.options={split_seed: .nan}", "data.options.split_seed", "nan"),
        ("parallel.sharding_options={mixing: [0.5, .inf]}", "parallel.sharding_options.mixing[1]", "inf"),
        ("algorithm.options.outer_lr=inf", "algorithm.options.outer_lr", "'inf'"),  # a string float() reads as inf
    ],
)
def test_a_non_finite_option_value_is_refused_naming_the_key(override: str, key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{key}: expected a finite number, got {value}")):
        loading.load(None, ["algorithm.name=diloco", override])


def test_an_infinite_outer_lr_is_refused_by_the_command_before_launch(capsys: pytest.CaptureFixture[str]) -> None:
    from apps.train import main

    assert main(["-o", "algorithm.name=diloco", "-o", "algorithm.options.outer_lr=.inf"]) == failure.EXIT_CONFIG
    assert "config error: algorithm.options.outer_lr: expected a finite number, got inf" in capsys.readouterr().err


def test_parameters_holding_nan_are_named_with_the_step() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    check_parameters(model.named_parameters(), 5, allowed=False)
    with torch.no_grad():
        model[1].bias.fill_(float("nan"))
    with pytest.raises(NonFiniteError, match=re.escape("parameter 1.bias holds inf or nan after step 5")):
        check_parameters(model.named_parameters(), 5, allowed=False)
    check_parameters(model.named_parameters(), 5, allowed=True)


@pytest.mark.mpi
@needs_comm
def test_a_diverging_run_stops_with_its_own_exit_code_naming_the_step(tmp_path: Path) -> None:
    w = runs.watch(runs.args(tmp_path, "diverge", "diloco", 2, *DIVERGING), "step 1/")
    assert w.returncode == failure.EXIT_NONFINITE, w.output
    assert re.search(
        r"ranks? [\d, ]+ failed: NonFiniteError: the loss is nan at step \d+: training diverged", last_line(w.output)
    ), w.output
    assert "done:" not in w.output and "Traceback" not in w.output, w.output


@pytest.mark.mpi
@needs_comm
def test_allow_nonfinite_trains_on_to_done(tmp_path: Path) -> None:
    proc = runs.run(runs.args(tmp_path, "diverge", "diloco", 2, *DIVERGING, "-o", "train.allow_nonfinite=true"))
    out = proc.stdout + proc.stderr
    assert "loss nan" in out and "done: 8 steps" in out, out
