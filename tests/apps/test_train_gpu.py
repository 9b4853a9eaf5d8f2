"""`python -m apps.train` on a GPU (marked gpu; scripts/gpu_check.sh runs them there): the GPT config on one
rank in bf16, with its tokens/s and MFU; plsgd and lapsgd on 2 ranks over MPI with CUDA tensors (both ranks
on the one GPU; lapsgd's Hogwild workers share each rank's model by CUDA IPC). Each prints a `GPU-RESULT:`
line for the check's summary."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

import pycomm
from tests import pseudo_text
from tests.apps import runs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and pycomm.build_info()["cuda"]),
        reason="needs a GPU and a build of pycomm with CUDA",
    ),
]
GPT_STEPS = 60


def rows(run_dir: Path, name: str = "train.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def test_gpt_on_one_gpu_reports_tokens_per_second_and_mfu(tmp_path):
    # tiny Shakespeare does not travel to the GPU machine; tok/s and MFU depend on the model and batch, not the text
    data = pseudo_text.write(tmp_path / "input.txt", chars=600_000, letters="abcdefghijklmnopqrstuvwxyz", words=2000)
    proc = runs.run(
        [
            "-m",
            "apps.train",
            "--nproc",
            "1",
            "--config",
            "apps/configs/gpt_shakespeare_char.yaml",
            "-o",
            f"data.path={data}",
            "-o",
            "train.device=cuda",
            "-o",
            "train.dtype=bfloat16",
            "-o",
            "train.epochs=0",
            "-o",
            f"train.max_steps={GPT_STEPS}",
            "-o",
            "train.log_every=10",
            "-o",
            "train.eval_every_epochs=100",
            "-o",
            "logging.plot=false",
            "-o",
            f"out_dir={tmp_path / 'runs'}",
            "-o",
            "name=gpt",
        ],
        timeout=400,
    )
    assert "over 1 rank(s) on cuda" in proc.stdout, proc.stdout
    steps = rows(tmp_path / "runs" / "gpt")
    assert [r["step"] for r in steps] == list(range(1, GPT_STEPS + 1))
    steady = [r for r in steps if r["step"] > 10]  # past cuBLAS / allocator warm-up
    tok = statistics.median(r["tokens_per_s"] for r in steady)
    mfu = statistics.median(r["mfu"] for r in steady)
    assert tok > 0 and 0 < mfu < 1, (tok, mfu)
    assert steps[-1]["loss"] < steps[0]["loss"], (steps[0]["loss"], steps[-1]["loss"])
    print(
        f"GPU-RESULT: apps.train gpt_shakespeare_char (6 layers, 384 wide, block 256, batch 64, bf16 autocast) "
        f"on 1 {torch.cuda.get_device_name(0)}: {tok:.0f} tok/s, MFU {100 * mfu:.1f}% (median of steps "
        f"11-{GPT_STEPS}); loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}"
    )


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["plsgd", "lapsgd"])
def test_two_ranks_over_mpi_with_cuda_tensors(tmp_path, algorithm):
    if not pycomm.build_info()["mpi"]:
        pytest.skip("needs a build of pycomm with MPI")
    proc = runs.run(runs.args(tmp_path, algorithm, algorithm, 2, "-o", "train.device=cuda"), timeout=400)
    assert f"{algorithm} over 2 rank(s) on cuda" in proc.stdout, proc.stdout
    steps = rows(tmp_path / algorithm)
    evals = rows(tmp_path / algorithm, "eval.jsonl")
    assert steps and steps[-1]["ranks"] == 2 and steps[-1]["comm_bytes"] > 0, steps[-1:]
    assert evals and evals[-1]["accuracy"] > 0.3, evals[-1:]  # the MLP learns MNIST on the GPU (chance: 0.1)
    print(
        f"GPU-RESULT: apps.train {algorithm} (MLP, embedded MNIST) on 2 ranks sharing "
        f"{torch.cuda.get_device_name(0)} over MPI: {steps[-1]['step']} steps, eval accuracy "
        f"{100 * evals[-1]['accuracy']:.1f}%, {steps[-1]['samples_per_s']:.0f} samples/s"
    )
