"""`python -m apps.train -o algorithm.name=diloco` on the two reference configs, 2 real ranks: the GPT
config (char GPT, AdamW, cosine schedule; shrunk to a few steps on a small text) as Streaming DiLoCo with
int4 outer gradients, and the embedded MNIST default (its plsgd options dropped for DiLoCo's). Both train
to the end with per-rank checkpoints and log H and the bytes sent; diloco's option errors are config
errors before any rank starts."""

from __future__ import annotations

import csv
import math
import random
import re
from pathlib import Path

import pytest

from apps.config import loading
from apps.config.loading import ConfigError
from tests.apps import runs


def _text(path: Path, chars: int = 12_000) -> None:
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 6))) for _ in range(100)]
    path.write_text(" ".join(rng.choice(words) for _ in range(chars // 4)))


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(path)))


@pytest.mark.mpi
def test_diloco_trains_the_gpt_and_mnist_configs(tmp_path: Path) -> None:
    _text(tmp_path / "t.txt")
    runs.run(
        [
            "-m",
            "apps.train",
            "--nproc",
            "2",
            "--config",
            "apps/configs/gpt_shakespeare_char.yaml",
            "-o",
            "algorithm.name=diloco",
            "-o",
            f"out_dir={tmp_path}",
            "-o",
            "name=gpt",
            "-o",
            f"data.path={tmp_path / 't.txt'}",
            "-o",
            "data.options={block_size: 16}",
            "-o",
            "data.batch_size=4",
            "-o",
            "data.eval_batch_size=16",
            "-o",
            "model.options={n_layer: 2, n_head: 2, n_embd: 32, dropout: 0.0}",
            "-o",
            "train.max_steps=12",
            "-o",
            "schedule.total_steps=12",
            "-o",
            "schedule.warmup_steps=2",
            "-o",
            "train.eval_every_epochs=100",
            "-o",
            "checkpoint.every_steps=6",
            "-o",
            "logging.plot=false",
            "-o",
            "algorithm.options={inner_steps: 4, fragments: 2, sync_delay: 1, mixing: 0.5, codec: int4}",
        ],
        timeout=400,
    )
    rows = _rows(tmp_path / "gpt" / "train.csv")
    assert len(rows) == 12 and {r["H"] for r in rows} == {"4"}
    sent = [float(r["comm_bytes"]) for r in rows]
    assert sent == sorted(sent) and sent[-1] > sent[0] > 0  # the rounds' bytes, cumulative
    assert math.isfinite(float(_rows(tmp_path / "gpt" / "eval.csv")[-1]["loss"]))
    ckpt = tmp_path / "gpt" / "checkpoints" / "ckpt.step00000012"
    assert len(list(ckpt.glob("*optim*"))) >= 2, sorted(p.name for p in ckpt.iterdir())  # one per rank

    proc = runs.run(
        [
            "-m",
            "apps.train",
            "--nproc",
            "2",
            "-o",
            "algorithm.name=diloco",
            "-o",
            f"out_dir={tmp_path}",
            "-o",
            "name=mnist",
            *runs.SMALL,
            "-o",
            "algorithm.options={inner_steps: 16}",
        ],
        timeout=400,
    )
    assert "diloco over 2 rank(s)" in proc.stdout + proc.stderr
    rows = _rows(tmp_path / "mnist" / "train.csv")
    assert int(rows[-1]["step"]) == 60 and rows[-1]["H"] == "16"
    accuracy = float(_rows(tmp_path / "mnist" / "eval.csv")[-1]["accuracy"])
    assert accuracy > 0.7, accuracy  # 60 steps of the MLP (DiLoCo rounds at 16, 32, 48)


@pytest.mark.parametrize(
    "options, message",
    [
        ("{inner_steps: 4, sync_delay: 4}", "sync_delay=4 must be < inner_steps=4"),
        ("{inner_steps: 8, alpha: 0.1}", "applies only with inner_steps='qsr'"),
        ("{outer_optimizer: Adamm}", "outer_optimizer 'Adamm' is not a torch.optim optimizer"),
        ("{codec: int5}", "codec 'int5' is not a codec name"),
    ],
)
def test_diloco_option_errors_are_config_errors(options: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        loading.load(None, ["algorithm.name=diloco", f"algorithm.options={options}"])


def test_switching_to_diloco_drops_plsgd_options() -> None:
    cfg = loading.load(None, ["algorithm.name=diloco"])
    assert cfg.algorithm.name == "diloco" and "averaging_freq" not in cfg.algorithm.options
