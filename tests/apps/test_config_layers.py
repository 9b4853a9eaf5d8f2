"""How a configuration is put together: files layered left to right (positional or --config), the
embedded default beneath them, a switch of algorithm (built in or the user's) that drops the old
algorithm's options with a note, SmolCluster's keys, and the learning-rate schedule's horizon that train.max_steps leaves alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from apps.budget import Budget
from apps.config import loading
from apps.config.loading import ConfigError
from apps.train import main
from tests.launch import ROOT, worker_env


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "apps.train", *argv],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def two_files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "a.yaml").write_text("optim: {lr: 0.5, momentum: 0.5}\ntrain: {epochs: 7}\n")
    (tmp_path / "b.yaml").write_text("optim: {lr: 0.25}\n")
    return tmp_path / "a.yaml", tmp_path / "b.yaml"


def test_repeated_config_files_layer_left_to_right(
    two_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_files
    cfg = loading.load([a, b])
    assert (cfg.optim.lr, cfg.optim.momentum, cfg.train.epochs) == (0.25, 0.5, 7.0)
    assert main(["--config", str(a), "--config", str(b), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.25" in out and "momentum: 0.5" in out and "epochs: 7.0" in out


def test_a_positional_config_file_is_read(two_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_files
    assert main([str(a), "--print-config", "-o", "optim.lr=0.125"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.125" in out and "momentum: 0.5" in out
    assert main([str(a), "--config", str(b), "--print-config"]) == 0  # positional files come first
    assert "lr: 0.25" in capsys.readouterr().out


def test_switching_algorithm_drops_the_options_it_lacks_with_a_note() -> None:
    proc = cli("apps/configs/default.yaml", "-o", "algorithm.name=easgd", "--print-config")
    assert proc.returncode == 0, proc.stderr
    assert "dropped algorithm.options averaging_freq" in proc.stderr and "'easgd' does not take" in proc.stderr
    assert "name: easgd" in proc.stdout and "options: {}" in proc.stdout
    cfg = loading.load("apps/configs/sdtl_lsgd_resnet20_cifar10.yaml", ["algorithm.name=easgd"])
    assert set(cfg.algorithm.options) <= {"comm_period", "dist_pulling_strength", "local_pulling_strength"}
    assert cfg.algorithm.options  # the options both take are kept
    cfg = loading.load(None, ["algorithm={name: mbsgd}"])  # a whole section replaced: no stale options
    assert cfg.algorithm.options == {}
    with pytest.raises(ConfigError, match="unknown algorithm.options key 'averaging_freq' for 'easgd'"):
        loading.load(None, ["algorithm.name=easgd", "algorithm.options.averaging_freq=4"])  # set after: an error


@pytest.fixture
def registry_restored():
    """The plugin registers its algorithm in this process: leave the registry as other tests expect it."""
    from algorithms import registry

    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    sys.modules.pop("tests.apps.plugins.signsgd", None)


def test_a_custom_algorithm_and_a_built_in_follow_one_rule_for_inherited_options(registry_restored) -> None:
    """Options held over a switch are dropped for a built-in algorithm and for one of the user's alike (its
    module imported to learn its options, given before or after the name): the embedded default's
    averaging_freq quietly, one the user set with a note; an option set after the switch is checked."""
    plugin = ["algorithm.module=tests.apps.plugins.signsgd", "algorithm.name=test-signsgd"]
    proc = cli("--print-config", "--nproc", "1", *(a for o in plugin for a in ("-o", o)))  # a fresh process
    assert proc.returncode == 0, proc.stderr
    assert "name: test-signsgd" in proc.stdout and "options: {}" in proc.stdout and "note:" not in proc.stderr
    for switch in (plugin, plugin[::-1], ["algorithm.name=easgd"]):
        quiet = loading.resolve(None, switch, world_size=1)
        assert quiet.config.algorithm.options == {} and not quiet.notes, (switch, quiet.notes)
        noted = loading.resolve(None, ["algorithm.options.averaging_freq=4", *switch], world_size=1)
        assert noted.config.algorithm.options == {}, switch
        assert any("dropped algorithm.options averaging_freq" in n for n in noted.notes), noted.notes
    with pytest.raises(ConfigError, match="unknown algorithm.options key 'averaging_freq' for 'test-signsgd'"):
        loading.load(None, [*plugin, "algorithm.options.averaging_freq=4"], world_size=1)


def test_a_later_file_switching_algorithm_drops_an_earlier_files_options(tmp_path: Path) -> None:
    (tmp_path / "easgd.yaml").write_text("algorithm: {name: easgd, options: {comm_period: 2}}\n")
    resolved = loading.resolve(["apps/configs/default.yaml", tmp_path / "easgd.yaml"])
    assert resolved.config.algorithm.options == {"comm_period": 2}
    assert any("averaging_freq" in note for note in resolved.notes)


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.options.averaging_freq=0", "averaging_freq must be >= 1"),
        ("algorithm.options={codec: gzip}", "codec 'gzip' is not a codec name"),
        ("algorithm.name=none", "this launch runs 2 ranks"),
        ("algorithm.name=lapsgd", "algorithm.options: num_processes must be"),
    ],
)
def test_print_config_fails_where_the_run_would(
    override: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["-o", "algorithm.options.num_processes=0"] if override.endswith("lapsgd") else []
    assert main(["--print-config", "-o", override, *extra]) == 2
    assert message in capsys.readouterr().err


def test_smolcluster_training_keys_map_to_ours_or_suggest(tmp_path: Path) -> None:
    (tmp_path / "gpt_config.yaml").write_text(
        "training: {batch_size: 16, epochs: 2, learning_rate: 6.0e-4, weight_decay: 0.01, grad_clip_norm: 1.0}\n"
        "lr_schedule: {warmup_iters: 100, min_lr: 6.0e-5}\n"
    )
    resolved = loading.resolve(tmp_path / "gpt_config.yaml")
    cfg = resolved.config
    assert (cfg.data.batch_size, cfg.train.epochs, cfg.optim.lr, cfg.optim.weight_decay, cfg.train.grad_clip) == (
        16,
        2.0,
        6e-4,
        0.01,
        1.0,
    )
    assert (cfg.schedule.warmup_steps, cfg.schedule.min_lr) == (100, 6e-5)
    assert any("'training.learning_rate' is SmolCluster's name for 'optim.lr'" in n for n in resolved.notes)
    assert loading.load(None, ["training.batch_size=16"]).data.batch_size == 16  # its --override habit
    with pytest.raises(ConfigError, match=r"unknown config key 'training.lr' \(did you mean 'optim.lr'\?\)"):
        loading.load(None, ["training.lr=3e-4"])


def test_max_steps_leaves_the_schedule_horizon_alone() -> None:
    cfg = loading.load(None, ["train.epochs=3", "train.max_steps=10"])
    budget = Budget.from_config(cfg, 100)
    assert (budget.total_steps, budget.schedule_steps) == (10, 300)
    assert "horizon 300 steps (from train.epochs=3)" in budget.describe() and "stops at step 10" in budget.describe()
    squeezed = Budget.from_config(loading.load(None, ["train.max_steps=10", "schedule.total_steps=10"]), 100)
    assert squeezed.schedule_steps == 10 and "schedule.total_steps" in squeezed.describe()
    by_epochs = Budget.from_config(loading.load(None, ["train.max_steps=10", "schedule.total_epochs=5"]), 100)
    assert by_epochs.schedule_steps == 500
    only_steps = Budget.from_config(loading.load(None, ["train.epochs=0", "train.max_steps=10"]), 100)
    assert (only_steps.total_steps, only_steps.schedule_steps) == (10, 10)


def test_s3df_script_asks_for_nccl_which_auto_never_picks() -> None:
    from pycomm.backends import choose_auto
    from pycomm.launch_env import detect

    srun = detect(
        {
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "4",
            "SLURM_LOCALID": "0",
            "SLURM_STEP_ID": "0",
            "SLURM_JOB_NODELIST": "n1",
        }
    )
    assert choose_auto(srun) != "nccl"
    script = (ROOT / "apps" / "slurm" / "s3df.sbatch").read_text()
    assert "-o launch.backend=nccl" in script and "NCCL for CUDA tensors" not in script


def test_training_stub_keys_map_to_ours(tmp_path: Path) -> None:
    (tmp_path / "stub.yaml").write_text(
        "dist: {cpu_only: true, backend: mpi, dtype: bfloat16, sharding_stage: zero3_hybrid}\n"
        "lr_scheduler: {total_iterations: 1000000, warmup_iterations: 10}\n"
        "checkpoint: {state_dict_type: full, chkpt_saving_iterations: 100, directory: experiments/chkpts, "
        "prefix: dummy-0.1}\n"
    )
    resolved = loading.resolve(tmp_path / "stub.yaml")
    cfg = resolved.config
    assert (cfg.algorithm.name, cfg.algorithm.options) == ("zero3", {"hybrid": True})
    assert (cfg.train.device, cfg.train.dtype, cfg.launch.backend) == ("cpu", "bfloat16", "mpi")
    assert (cfg.schedule.warmup_steps, cfg.schedule.total_steps) == (10, 1000000)
    assert (
        cfg.checkpoint.every_steps,
        cfg.checkpoint.state_dict_type,
        cfg.checkpoint.directory,
        cfg.checkpoint.prefix,
    ) == (100, "full", "experiments/chkpts", "dummy-0.1")
    assert any("'dist.sharding_stage' is maxie's name for 'algorithm'" in n for n in resolved.notes)
    zero0 = loading.load(None, ["dist.sharding_stage=zero0", "dist.cpu_only=false"])
    assert (zero0.algorithm.name, zero0.algorithm.options, zero0.train.device) == ("mbsgd", {}, "auto")
    assert loading.load(None, ["dist.sharding_stage=zero2_hybrid"]).algorithm.options == {"hybrid": True}
    with pytest.raises(ConfigError, match=r"dist.sharding_stage: expected one of zero0, .*got 'zero4'"):
        loading.load(None, ["dist.sharding_stage=zero4"])
    with pytest.raises(ConfigError, match=r"unknown config key 'dist.cpu'"):
        loading.load(None, ["dist.cpu=true"])
    with pytest.raises(ConfigError, match=r"checkpoint.state_dict_type"):
        loading.load(None, ["checkpoint.state_dict_type=local"])


@pytest.mark.parametrize("path", sorted((ROOT / "apps" / "configs").glob("zero*.yaml")), ids=lambda p: p.name)
def test_zero_configs_resolve_and_print(path: Path) -> None:
    """Each ZeRO config layers its stage over the base run; --print-config where its optional packages
    are here (the ViT ones need torchvision and wandb, which --print-config checks first)."""
    cfg = loading.load(path)
    stage = path.name.split("_")[0]
    assert cfg.algorithm.name == stage and cfg.algorithm.options == (
        {"hybrid": True} if "_hybrid_" in path.name else {}
    )
    assert cfg.checkpoint.state_dict_type == "sharded"
    base = loading.load(ROOT / "apps" / "configs" / loading.read_layers(path)[0][0].rsplit("/", 1)[-1])
    assert (cfg.model, cfg.optim, cfg.data) == (base.model, base.optim, base.data)
    from apps import requirements

    try:
        requirements.check(cfg)
    except ValueError:
        return
    proc = cli(str(path), "--print-config")
    assert proc.returncode == 0, proc.stderr
    assert f"name: {stage}" in proc.stdout
