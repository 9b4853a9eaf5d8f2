"""Configurations that would train wrong are refused before launch, with a message naming the key:
ranges, non-finite numbers, paths outside out_dir, batch sizes over the ranks, a changed optimizer
or another algorithm on resume, and files that are not YAML."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from apps.config import loading
from apps.config.loading import ConfigError
from apps.train import main
from tests.apps import runs
from tests.launch import ROOT, worker_env


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.grad_clip=-1", "train.grad_clip must be > 0 (or null), got -1"),
        ("optim.lr=.nan", "optim.lr: expected a finite number, got nan"),
        ("optim.lr=.inf", "optim.lr: expected a finite number"),
        ("train.max_steps=0", "train.max_steps must be > 0 (or null), got 0"),
        ("train.max_steps=-5", "train.max_steps must be > 0"),
        ("launch.nproc=0", "launch.nproc must be > 0"),
        ("checkpoint.keep_last=-1", "checkpoint.keep_last must be >= 0, got -1"),
        ("checkpoint.every_steps=-5", "checkpoint.every_steps must be >= 0, got -5"),
        ("data.segment_size=0", "data.segment_size must be > 0 (or null), got 0"),
        ("data.num_workers=-1", "data.num_workers must be >= 0, got -1"),
        ("train.eval_every_epochs=0", "train.eval_every_epochs must be > 0"),
        ("optim.betas=[0.9, 1.5]", "optim.betas[1] must be >= 0 and < 1, got 1.5"),
        ("optim.momentum=-0.1", "optim.momentum must be >= 0 and < 1"),
        ("name=../../escape", "name must be a plain file name"),
        ("checkpoint.prefix=a/b", "checkpoint.prefix must be a plain file name"),
        ("train.epochs=0", "train.epochs must be > 0 (or set train.max_steps)"),
        ("schedule={name: multistep, warmup_steps: 5}", "schedule.warmup_* is supported with schedule.name=cosine"),
        # values that would train wrong or crash inside the ranks, naming no field, unless refused here
        ("schedule.min_lr=5", "schedule.min_lr=5 is above optim.lr=0.05: the cosine schedule would climb"),
        ("optim.lr=1e300", "optim.lr must be > 0 and <= 3.4028234663852886e+38, got 1e+300"),
        ("schedule.baseline_lr=1e39", "schedule.baseline_lr must be >= 0 and <= 3.4028234663852886e+38"),
        (f"train.seed={2**70}", f"train.seed must be >= 0 and <= {2**64 - 1}, got {2**70}"),
    ],
)
def test_configs_that_would_train_wrong_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        loading.load(None, [override])


def test_max_steps_error_blames_max_steps_not_epochs() -> None:
    with pytest.raises(ConfigError) as e:
        loading.load(None, ["train.max_steps=-5"])
    assert "train.epochs" not in str(e.value)


def test_nproc_zero_is_refused_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--nproc", "0", "--print-config"])
    assert e.value.code == 2 and "--nproc: must be >= 1" in capsys.readouterr().err


def test_a_binary_file_is_named_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "weights.yaml").write_bytes(b"\x80\x02}q\x00(X\x05\x00\x00\x00")
    with pytest.raises(ConfigError, match=r"weights.yaml: not a text YAML file"):
        loading.load(tmp_path / "weights.yaml")


def test_servers_that_leave_no_worker_are_refused_for_the_launch() -> None:
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "algorithm.options.servers=10 leaves no worker among the 4 ranks of this launch (ranks 0..9 serve)"
        ),
    ):
        loading.load(None, ["algorithm.name=asyncps", "algorithm.options={servers: 10}"], world_size=4)
    assert loading.load(None, ["algorithm.name=asyncps", "algorithm.options={servers: 3}"], world_size=4)


def test_an_unset_text_path_is_the_embedded_shakespeare(capsys: pytest.CaptureFixture[str]) -> None:
    """The text dataset used to need data.path; every GPT config now runs on a fresh clone with no download."""
    assert main(["-o", "data.name=text", "-o", "model.name=gpt", "--print-config"]) == 0
    assert main(["-o", "train.seed=7", "--print-config"]) == 0  # mnist: the embedded copy needs no path


def test_a_path_among_the_data_options_is_refused_naming_data_path(capsys: pytest.CaptureFixture[str]) -> None:
    """data.options.path used to be checked as unset (the wrong error) while the run read it."""
    assert (
        main(["-o", "data.name=text", "-o", "model.name=gpt", "-o", "data.options.path=/x/input.txt", "--print-config"])
        == 2
    )
    assert capsys.readouterr().err.strip() == (
        "config error: data.options.path='/x/input.txt': a dataset's files are "
        "named by data.path (-o data.path=...), not by data.options"
    )


def test_total_batch_size_gives_the_per_rank_batch() -> None:
    assert loading.load(None, ["data.total_batch_size=64"], world_size=4).data.batch_size == 16
    with pytest.raises(ConfigError, match="total_batch_size=66 is not divisible by the 4 ranks"):
        loading.load(None, ["data.total_batch_size=66"], world_size=4)
    with pytest.raises(ConfigError, match=r"disagree on 4 ranks \(64 / 4 = 16\)"):
        loading.load(None, ["data.total_batch_size=64", "data.batch_size=32"], world_size=4)
    cfg = loading.load(None, ["data.total_batch_size=256", "data.physical_batch_size=32"], world_size=2)
    assert (cfg.data.batch_size, cfg.data.physical_batch_size) == (128, 32)
    with pytest.raises(ConfigError, match="physical_batch_size=48 must divide the per-rank batch"):
        loading.load(None, ["data.physical_batch_size=48"])
    with pytest.raises(ConfigError, match="lppsgd trains in its own worker processes"):
        loading.load(None, ["algorithm={name: lppsgd}", "data.physical_batch_size=8"])


def test_resume_with_a_changed_learning_rate_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = runs.args(tmp_path, "r", "none", 1, "-o", "train.max_steps=10")
    runs.run(argv)
    recorded = (tmp_path / "r" / "config.yaml").read_text()
    assert main(argv[2:] + ["-o", "optim.lr=0.2", "--resume", "auto"]) == 2
    err = capsys.readouterr().err
    assert "optim.lr is 0.2 here but 0.05 in the run being resumed" in err, err
    assert (tmp_path / "r" / "config.yaml").read_text() == recorded  # what ran stays recorded
    assert yaml.safe_load(recorded)["optim"]["lr"] == 0.05
    assert main(argv[2:] + ["-o", "optim.lr=0.2", "--print-config"]) == 0  # a new run may choose any lr
    assert main(argv[2:] + ["-o", "algorithm.name=plsgd", "--resume", "auto"]) == 2  # another algorithm's
    err = capsys.readouterr().err
    assert re.search(
        r"--resume: checkpoint .*step00000010 was written by algorithm 'none' \(model identical, "
        r"optim identical\); this run uses 'plsgd': resume with algorithm.name=none",
        err,
    ), err


def test_a_missing_data_file_is_refused_before_launch_with_one_line(tmp_path: Path) -> None:
    """No rank starts (a missing file found by every rank printed 55 lines of tracebacks)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "apps.train",
            "--nproc",
            "2",
            "-o",
            f"out_dir={tmp_path}",
            "-o",
            "data.name=text",
            "-o",
            "model.name=gpt",
            "-o",
            f"data.path={tmp_path / 'nope.txt'}",
            "-o",
            "algorithm.name=mbsgd",
            "-o",
            "algorithm.options={}",
        ],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"config error: data: data.path='{tmp_path / 'nope.txt'}' is not a file (data.name=text reads one text file; "
        "give one with -o data.path=PATH, or leave data.path unset for the embedded tiny Shakespeare)"
    )
    assert "Traceback" not in proc.stderr and "rank" not in proc.stdout, proc


GPT_TEXT = ["model.name=gpt", "data.name=text", "algorithm.name=mbsgd", "algorithm.options={}"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.options={block_size: 0}", "model.options.block_size=0: expected a whole number >= 1"),
        ("model.options={block_size: -1}", "model.options.block_size=-1: expected a whole number >= 1"),
        ("data.options={block_size: 0}", "data.options.block_size=0: expected a whole number >= 1"),
        ("data.options={block_size: -1}", "data.options.block_size=-1: expected a whole number >= 1"),
        ("data.options={stride: 0}", "data.options.stride=0: expected a whole number >= 1"),
        ("data.options={eval_fraction: 1.0}", "data.options.eval_fraction=1.0: expected a number >= 0 and < 1"),
        (
            "model.options={n_head: 5}",
            "model.options.n_head=5 does not divide model.options.n_embd=384: each attention "
            "head takes n_embd / n_head of the width; choose n_head among [1, 2, 3, 4, 6, 8,",
        ),
        ("model.options={n_embd: 100}", "model.options.n_head=6 does not divide model.options.n_embd=100"),
        ("model.options={dropout: 1.5}", "model.options.dropout=1.5: expected a number >= 0 and < 1"),
        ("model.options={n_layer: -1}", "model.options.n_layer=-1: expected a whole number >= 0"),
        (
            "model.options={block_size: 8}",
            "model.options.block_size=8 is shorter than the data's windows "
            "(data.options.block_size=256); set model.options.block_size >= 256",
        ),
    ],
)
def test_model_and_data_options_the_ranks_could_not_use_are_refused(override: str, message: str) -> None:
    """They used to fail on every rank inside a constructor (or train with a dropout of 1.5), naming no key."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        loading.load(None, [*GPT_TEXT, "data.path=input.txt", override])


def test_vit_heads_must_divide_its_width() -> None:
    with pytest.raises(ConfigError, match=re.escape("model.options.heads=5 does not divide model.options.dim=192")):
        loading.load(None, ["model.name=vit", "data.name=cifar10", "data.path=x", "model.options={heads: 5}"])


@pytest.mark.parametrize("model, fragments, layers", [("mlp", 4, 3), ("gpt", 6, 5)])
def test_more_diloco_fragments_than_layers_are_refused(model: str, fragments: int, layers: int) -> None:
    """The GPT of 2 blocks has 5 layers (token and position embeddings, 2 blocks, the final norm; the head is
    tied to the token embedding): as many fragments pass, one more is refused before any rank starts."""
    base = [
        f"model.name={model}",
        "model.options={n_layer: 2}" if model == "gpt" else "model.options={}",
        "algorithm.name=diloco",
    ]
    with pytest.raises(
        ConfigError, match=re.escape(f"fragments={fragments} is more than the {layers} layers of model.name={model}")
    ):
        loading.load(None, [*base, f"algorithm.options={{inner_steps: 64, fragments: {fragments}}}"])
    loading.load(None, [*base, f"algorithm.options={{inner_steps: 64, fragments: {layers}}}"])


def test_a_block_longer_than_the_text_is_refused_before_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every rank used to fail in the dataset's constructor; now the launcher names the key and the text's length."""
    text = tmp_path / "t.txt"
    text.write_text("x" * 100)
    argv = ["-o", f"out_dir={tmp_path}", *(a for o in GPT_TEXT for a in ("-o", o)), "-o", f"data.path={text}"]
    assert main([*argv, "-o", "data.options={block_size: 32}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"config error: data: data.options.block_size=32: the text '{text}' has 100 characters, 90 for training "
        "and 10 for evaluation (eval_fraction=0.1); each split needs more than block_size: choose block_size < 10"
    )
    assert main([*argv, "-o", "data.options={block_size: 9}", "--print-config"]) == 0
