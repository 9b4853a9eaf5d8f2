"""Config validation: unknown keys suggest the closest, bad types, overrides, every shipped YAML loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps import optim
from apps.config import loading
from apps.config.loading import ConfigError
from apps.config.schema import Config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "apps" / "configs").glob("*.yaml"))


def test_no_config_is_the_embedded_default_and_matches_default_yaml() -> None:
    cfg = loading.load(None)
    assert cfg == Config()
    assert (cfg.model.name, cfg.data.name, cfg.data.path, cfg.launch.nproc) == ("cnn", "mnist", None, 2)
    assert loading.load("apps/configs/default.yaml") == cfg


@pytest.mark.parametrize(
    "override, message",
    [
        ("optim.lrr=0.1", "did you mean 'optim.lr'"),
        ("tarin.epochs=1", "did you mean 'train'"),
        ("model.options.widht=8", "did you mean 'width'"),
        ("data.options.eval_cont=10", "did you mean 'eval_count'"),
        ("model.name=cnm", "did you mean 'cnn'"),
        ("optim.name=sdg", "did you mean 'sgd'"),
    ],
)
def test_unknown_names_suggest_the_closest(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        loading.load(None, [override])


@pytest.mark.parametrize(
    "override, message",
    [
        ("optim.lr=abc", "optim.lr: expected float"),
        ("data.batch_size=1.5", "data.batch_size: expected int"),
        ("data.batch_size=0", "data.batch_size must be > 0"),
        ("optim.nesterov=3", "optim.nesterov: expected bool"),
        ("optim.betas=0.9", "optim.betas: expected a list"),
        ("schedule.milestones=[1, x]", r"schedule.milestones\[1\]: expected float"),
        ("optim.lr", "expected key=value"),
    ],
)
def test_bad_values_name_the_key_and_what_was_expected(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        loading.load(None, [override])


def test_overrides_are_typed_and_repeatable() -> None:
    cfg = loading.load(
        None,
        [
            "optim.lr=1e-3",
            "train.epochs=2",
            "schedule.milestones=[1, 2]",
            "model.options.width=8",
            "data.path=/x",
            "data.path=/y",
            "train.max_steps=null",
        ],
    )
    assert cfg.optim.lr == 0.001 and isinstance(cfg.optim.lr, float)
    assert cfg.train.epochs == 2.0 and cfg.schedule.milestones == [1.0, 2.0]
    assert cfg.model.options == {"width": 8} and cfg.data.path == "/y" and cfg.train.max_steps is None


def test_base_files_merge_deeply(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("optim: {lr: 0.5, momentum: 0.5}\ntrain: {epochs: 7}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\noptim: {lr: 0.25}\n")
    cfg = loading.load(tmp_path / "b.yaml")
    assert (cfg.optim.lr, cfg.optim.momentum, cfg.train.epochs) == (0.25, 0.5, 7.0)
    (tmp_path / "c.yaml").write_text("base: c.yaml\n")
    with pytest.raises(ConfigError, match="loops"):
        loading.load(tmp_path / "c.yaml")


def test_missing_or_invalid_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        loading.load(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("optim: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        loading.load(tmp_path / "bad.yaml")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_loads_and_round_trips(path: Path, tmp_path: Path) -> None:
    cfg = loading.load(path)
    (tmp_path / "dumped.yaml").write_text(loading.dump(cfg))
    assert loading.load(tmp_path / "dumped.yaml") == cfg
    if cfg.algorithm.name != "none":  # algorithm options exist (epochs converted to steps)
        options = optim.algorithm_options(cfg.algorithm, 100, {"total_steps": 1000, "warmup_steps": 0})
        assert not any(k.endswith("_epochs") for k in options)


def test_epoch_options_become_steps_and_unknown_algorithm_options_are_named() -> None:
    cfg = loading.load(None, ["algorithm.options={averaging_freq: 4, pre_post_epochs: 1.5}"])
    assert optim.algorithm_options(cfg.algorithm, 10, {}) == {"averaging_freq": 4, "pre_post_steps": 15}
    with pytest.raises(ConfigError, match="did you mean 'averaging_freq'"):  # at load time, before any rank
        loading.load(None, ["algorithm.options={averaging_frq: 4}"])
    with pytest.raises(ConfigError, match="did you mean 'plsgd'"):
        loading.load(None, ["algorithm.name=plsdg"])


def test_print_config_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from apps.train import main

    assert main(["--print-config", "-o", "optim.lr=0.2"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.2" in out and "name: mnist-cnn-plsgd" in out
    assert main(["-o", "optim.lrr=1"]) == 2
    assert "did you mean 'optim.lr'" in capsys.readouterr().err
