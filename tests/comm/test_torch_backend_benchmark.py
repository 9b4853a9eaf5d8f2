"""Smoke test of benchmarks/ddp_backend.py --quick: DDP on backend "pycomm" and on gloo both measured on real
ranks and the results file written with their ratio; and the models it trains (benchmarks/workers/ddp_tasks.py:
the MNIST CNN, the char GPT). No timing assertions (the machine is shared and noisy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import ddp_backend
from benchmarks.workers.ddp_tasks import GPT_BLOCK, task


@pytest.mark.mpi
def test_quick_run_measures_both_backends(tmp_path: Path) -> None:
    assert ddp_backend.main(["--quick", "--results-dir", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "ddp_backend.json").read_text())
    rows = {r["backend"]: r for r in doc["rows"]}
    assert set(rows) == {"pycomm", "gloo"} and all(r["samples_per_s"] > 0 for r in rows.values())
    assert rows["gloo"]["ratio"] == 1.0 and rows["pycomm"]["wrapper"] == "ddp" and rows["pycomm"]["ranks"] == 2
    assert doc["model"] == "mnist" and rows["pycomm"]["model"] == "mnist"
    samples = doc["samples"]["ddp 2 ranks idle"]
    assert len(samples["pycomm"]) == len(samples["gloo"]) == 2


def test_char_gpt_task_trains_from_the_same_start_on_disjoint_batches() -> None:
    gpt = task("gpt")
    a, b = gpt.make_model(), gpt.make_model()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))  # every rank starts alike
    assert sum(p.numel() for p in a.parameters()) > 100 * sum(
        p.numel() for p in task("mnist").make_model().parameters()
    )
    # more steps than one epoch holds: the batches go on into the next epoch; two ranks' first epochs are disjoint
    per_epoch = gpt.n_train // 2 // 8
    mine, theirs = gpt.batches(0, 2, 8, per_epoch + 3), gpt.batches(1, 2, 8, 3)
    assert len(mine) == per_epoch + 3 and all(len(i) == 8 for i in mine)
    assert not set(torch.cat(mine[:3]).tolist()) & set(torch.cat(theirs).tolist())
    loss = gpt.loss(a, mine[0])
    loss.backward()
    assert 3.0 < loss.item() < 5.0  # about ln(65): an untrained character model
    assert a.pos.weight.shape[0] == GPT_BLOCK


def test_unknown_model_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'resnet': expected one of mnist, gpt"):
        task("resnet")
