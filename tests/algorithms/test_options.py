"""Bad input to the algorithm wrappers raises clearly (single process: options are checked before the
communicator is touched); the registry lists every algorithm with its options."""

from __future__ import annotations

import pytest
import torch

import algorithms
from algorithms import OptionError


def sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)


def test_unknown_algorithm_lists_available() -> None:
    with pytest.raises(ValueError) as e:
        algorithms.CommOptimizer(sgd(), algorithm="sgd-with-magic")
    for name in ("mbsgd", "plsgd", "qsr", "easgd", "easgd+", "lsgd", "lsgd+"):
        assert name in str(e.value)


def test_missing_algorithm_name() -> None:
    with pytest.raises(TypeError, match="needs an algorithm"):
        algorithms.CommOptimizer(sgd())


def test_available_lists_options_with_defaults() -> None:
    av = algorithms.available()
    assert set(av) >= {"mbsgd", "plsgd", "qsr", "easgd", "easgd+", "lsgd", "lsgd+"}
    assert av["qsr"]["gamma"] == 2.0 and av["qsr"]["h_base"] >= 1
    assert {"comm_period", "dist_pulling_strength", "local_pulling_strength"} <= set(av["easgd"])
    assert av["lsgd"]["leader_metric"] == "loss" and "leader_window" in av["lsgd"]
    assert all("codec" in opts and "bucket_bytes" in opts for opts in av.values())


def test_classes_are_importable_and_registered() -> None:
    for cls, name in (
        (algorithms.MBSGD, "mbsgd"),
        (algorithms.PLSGD, "plsgd"),
        (algorithms.QSR, "qsr"),
        (algorithms.EASGD, "easgd"),
        (algorithms.EASGDPlus, "easgd+"),
        (algorithms.LSGD, "lsgd"),
        (algorithms.LSGDPlus, "lsgd+"),
    ):
        assert cls.name == name and issubclass(cls, algorithms.CommOptimizer)


@pytest.mark.parametrize(
    "algorithm, options, match",
    [
        ("plsgd", {"averaging_freq": 0}, "averaging_freq must be >= 1"),
        ("plsgd", {"averaging_freq": 2.5}, "averaging_freq must be an integer"),
        ("plsgd", {"pre_post_steps": -1}, "pre_post_steps must be >= 0"),
        ("qsr", {"h_base": 0}, "h_base must be >= 1"),
        ("qsr", {"alpha": -0.1}, "alpha must be in"),
        ("qsr", {"h_min": 0}, "h_min must be >= 1"),
        ("easgd", {"comm_period": 0}, "comm_period must be >= 1"),
        ("easgd", {"dist_pulling_strength": 1.5}, r"dist_pulling_strength must be in \[0.0, 1.0\]"),
        ("easgd+", {"local_pulling_strength": -0.1}, "local_pulling_strength must be in"),
        ("lsgd", {"dist_pulling_strength": 2}, "dist_pulling_strength must be in"),
        ("lsgd", {"leader_metric": "accuracy"}, "leader_metric must be one of 'loss', 'proxy'"),
        ("lsgd", {"leader_window": 0}, "leader_window must be >= 1"),
        ("lsgd+", {"comm_period": "4"}, "comm_period must be an integer"),
        ("mbsgd", {"bucket_bytes": 0}, "bucket_bytes must be >= 1"),
        (
            "mbsgd",
            {"averaging_freq": 4},
            r"unknown option 'averaging_freq' for algorithm 'mbsgd'; valid options: "
            r"bucket_bytes, codec",
        ),
        ("easgd", {"comm_periode": 4}, "valid options: bucket_bytes, codec, comm_period, dist_pulling_strength"),
        ("plsgd", {"codec": "gzip"}, "codec 'gzip' is not a codec name"),
        ("plsgd", {"codec": object()}, r"codec must be None, a codec name \(.*\) or a pycomm codec instance"),
    ],
)
def test_invalid_options_raise(algorithm: str, options: dict, match: str) -> None:
    with pytest.raises(OptionError, match=match):
        algorithms.CommOptimizer(sgd(), algorithm=algorithm, **options)


def test_not_an_optimizer() -> None:
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        algorithms.CommOptimizer([torch.zeros(2)], algorithm="mbsgd")


def test_class_and_name_must_agree() -> None:
    with pytest.raises(ValueError, match="implements algorithm 'plsgd', not 'easgd'"):
        algorithms.PLSGD(sgd(), algorithm="easgd")


def test_qsr_moment_averaging_needs_adam() -> None:
    with pytest.raises(OptionError, match="avg_m / avg_v average Adam"):
        algorithms.CommOptimizer(sgd(), algorithm="qsr", avg_m=True)


def test_another_module_can_register_an_algorithm() -> None:
    from algorithms import registry

    @algorithms.register("test-only-algo")
    class TestOnly(algorithms.CommOptimizer):
        algorithm_options = {"period": 3}

    try:
        assert registry.lookup("Test-Only-Algo") is TestOnly
        assert algorithms.available()["test-only-algo"] == {"codec": None, "bucket_bytes": None, "period": 3}
        with pytest.raises(ValueError, match="already registered"):
            algorithms.register("test-only-algo")(type("Other", (algorithms.CommOptimizer,), {}))
    finally:
        registry._REGISTRY.pop("test-only-algo")
