"""apps.train's parallel: section. Before launch: a bad Mesh shape, `algorithm.name=pipeline`, a model that
cannot be cut (or has too few layers), an unsupported pair and a batch that does not cut into micro-batches
each fail with a message naming them (exit 2, no rank started). On 4 real ranks: the four example configs
(GPT pp2 x zero2, GPT pp2 x mbsgd, GPT zero3 inside x plsgd across, GPT zero2 inside x streaming diloco
across) train a tiny GPT for a few steps, evaluate, checkpoint, log every byte per mesh dimension, and the
first three resume (pp2 x mbsgd on another dp_replicate x dp_shard: its stages' states are identical over
the replicas); a pipelined run's checkpoint is served: apps.serve's model source joins the stages' model
files by parameter name."""

from __future__ import annotations

import csv
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch

from apps.config import loading
from apps.config.loading import ConfigError
from apps.train import main
from tests.apps.serving import TINY_GPT
from tests.launch import ROOT, worker_env


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["parallel.pp=3"], "parallel: pp=3 x dp_replicate=1 x dp_shard=-1 leaves 4/3 ranks for dp_shard"),
        (["parallel.pp=2", "parallel.dp_replicate=3", "parallel.dp_shard=1"], "= 6 ranks, but the communicator has 4"),
        (["algorithm.name=pipeline"], "algorithm.name=pipeline: pipeline parallelism is the parallel section"),
        (
            ["parallel.pp=2", "model.name=vit_mae", "data.name=random"],
            "model.name=vit_mae cannot be cut into pipeline stages",
        ),
        (
            ["parallel.pp=4", "model.name=gpt", "data.name=text", "data.path=README.md", "model.options={n_layer: 0}"],
            "model.name=gpt has 3 layers to cut, fewer than the 4 pipeline parts",
        ),
        (["parallel.pp=2", "algorithm.name=lapsgd"], "pipeline x lapsgd"),
        (["parallel.pp=2", "algorithm.name=lsgd", "algorithm.options={leader_metric: proxy}"], "pipeline x lsgd"),
        (["parallel.dp_replicate=2", "parallel.sharding=zero3", "algorithm.name=mbsgd"], "mbsgd over zero3"),
        (["parallel.dp_replicate=2", "parallel.sharding=zero2", "algorithm.name=lsgd"], "lsgd over zero2"),
        (["parallel.sharding=plsgd"], "parallel.sharding=plsgd: the method inside dp_shard must be a ZeRO stage"),
        (["parallel.pp=2", "algorithm.name=asyncps"], "asyncps runs its ranks as independent processes"),
        (["parallel.pp=2", "parallel.microbatches=5"], "does not divide into parallel.microbatches=5"),
        (
            [
                "parallel.pp=2",
                "model.name=gpt",
                "data.name=text",
                "data.path=README.md",
                "model.options.tie_weights=true",
            ],
            "tie_weights=true",
        ),
    ],
)
def test_bad_layouts_are_refused_before_launch(overrides: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        loading.resolve(overrides=overrides, world_size=4)


def test_an_unsupported_pair_fails_before_any_rank_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--nproc",
                "4",
                "-o",
                "parallel.dp_replicate=2",
                "-o",
                "parallel.sharding=zero3",
                "-o",
                "algorithm.name=easgd+",
            ]
        )
        == 2
    )
    assert "config error: parallel: easgd+ over zero3" in capsys.readouterr().err


def test_the_config_accepts_exactly_the_pipelines_schedules() -> None:
    """parallel.schedule's choices are the pipeline's (algorithms/pipeline/pipeline_schedules.py), so a
    schedule added there is selectable here and none is offered that the pipeline lacks."""
    from algorithms.pipeline import SCHEDULES
    from apps.config.schema import ParallelConfig

    assert typing.get_args(typing.get_type_hints(ParallelConfig)["schedule"]) == SCHEDULES


def test_the_gpt_is_untied_for_stages() -> None:
    resolved = loading.resolve("apps/configs/pp2_zero2_gpt_shakespeare_char.yaml", world_size=4)
    assert resolved.config.model.options["tie_weights"] is False
    assert any("tie_weights=false" in n for n in resolved.notes)


# (config, the dimensions that must carry bytes, those that must not, how it is resumed)
EXAMPLES = [
    ("pp2_zero2_gpt_shakespeare_char.yaml", ("pp", "dp_shard"), ("dp_replicate",), "same mesh"),
    ("pp2_mbsgd_gpt_shakespeare_char.yaml", ("pp", "dp"), ("dp_shard", "dp_replicate"), "other mesh"),
    ("hsdp_zero3_plsgd_gpt_shakespeare_char.yaml", ("dp_shard", "dp_replicate"), ("pp",), "same mesh"),
    ("hsdp_zero2_diloco_gpt_shakespeare_char.yaml", ("dp_shard", "dp_replicate"), ("pp",), "no resume"),
]
PERIODS = {
    "plsgd": ["-o", "algorithm.options.averaging_freq=2"],  # a round within the few steps
    "diloco": ["-o", "algorithm.options.inner_steps=2", "-o", "algorithm.options.fragments=2"],
}


@pytest.mark.mpi
@pytest.mark.parametrize("config, busy, idle, resume", EXAMPLES)
def test_example_configs_train(
    tmp_path: Path, config: str, busy: tuple[str, ...], idle: tuple[str, ...], resume: str
) -> None:
    words = "to be or not that is the question whether tis nobler in mind".split()
    (tmp_path / "text.txt").write_text(
        "\n".join(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(8)) for i in range(200))
    )
    argv = [
        sys.executable,
        "-m",
        "apps.train",
        "--config",
        f"apps/configs/{config}",
        "-o",
        f"data.path={tmp_path / 'text.txt'}",
        *TINY_GPT,
        "-o",
        "data.options.block_size=32",
        "-o",
        "data.batch_size=8",
        "-o",
        "data.eval_batch_size=32",
        "-o",
        "train.max_steps=4",
        *next((v for k, v in PERIODS.items() if k in config), []),
        "-o",
        "logging.plot=false",
        "-o",
        "logging.progress=false",
        "-o",
        f"out_dir={tmp_path}",
        "-o",
        "name=run",
    ]
    proc = subprocess.run(argv, cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "done: 4 steps" in proc.stdout, proc.stdout
    evals = list(csv.DictReader(open(tmp_path / "run" / "eval.csv")))  # every rank scored the whole model
    assert [int(r["step"]) for r in evals] == [4] and float(evals[0]["loss"]) > 0, evals
    rows = list(csv.DictReader(open(tmp_path / "run" / "train.csv")))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    for r in rows:  # the total is the sum over the dimensions (the loss-vs-bytes plot reads the total)
        assert int(r["comm_bytes"]) == sum(int(r[f"comm_bytes_{d}"]) for d in ("pp", "dp", "dp_replicate", "dp_shard"))
    for d in busy:  # every step communicates on these (plsgd across dp_replicate: every 2nd step)
        per_step = [int(b[f"comm_bytes_{d}"]) - int(a[f"comm_bytes_{d}"]) for a, b in zip(rows, rows[1:])]
        assert all(n > 0 for n in (per_step[0::2] if "plsgd" in config and d == "dp_replicate" else per_step)), (
            d,
            per_step,
        )
    for d in idle:
        assert all(int(r[f"comm_bytes_{d}"]) == 0 for r in rows), (d, rows[-1])
    assert (tmp_path / "run" / "checkpoints").is_dir()
    if busy[0] == "pp":
        _served_whole(tmp_path / "run")
    if resume == "no resume":
        return
    # the checkpoint (each stage's part of the model, the optimizer-side state per stage, shard or rank)
    # resumes, on another mesh where its states allow, the byte counters going on
    again = argv + ["--resume", "auto", "-o", "train.max_steps=6"]
    other = ["-o", "parallel.dp_replicate=1", "-o", "parallel.dp_shard=2"] if resume == "other mesh" else []
    proc = subprocess.run(again + other, cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "resumed from" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "run" / "train.csv")))
    assert [int(r["step"]) for r in rows] == list(range(1, 7))
    grown = [int(b["comm_bytes"]) - int(a["comm_bytes"]) for a, b in zip(rows, rows[1:])]
    assert all(n > 0 for n in grown[::2]), grown  # the byte counters went on from the checkpoint
    if resume == "other mesh":
        assert "as pp=2 x dp_replicate=1 x dp_shard=2" in proc.stdout, proc.stdout[-3000:]


def _served_whole(run: Path) -> None:
    """apps.serve's model (apps/serve/model_source.py) from a pp=2 run: every stage's trained values, by name."""
    from apps.serve import model_source

    served = model_source.load(str(run))
    ckpt = Path(served.source)
    state = served.model.state_dict()
    parts = [torch.load(ckpt / f"model_state_dict.pp{s}.pt", weights_only=True) for s in (0, 1)]
    assert not (ckpt / "model_state_dict.pt").exists() and all(parts)
    assert set(parts[0]) | set(parts[1]) == set(state) and "tok.weight" in parts[0] and "head.weight" in parts[1]
    for part in parts:
        for k, v in part.items():
            assert torch.equal(state[k], v.to(state[k].dtype)), k
    logits = served.model(torch.zeros(1, 4, dtype=torch.long))
    assert logits.shape[-1] == len(served.vocab) and torch.isfinite(logits).all()
