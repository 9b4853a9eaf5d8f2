"""benchmarks/nodes.py's bookkeeping, without a cluster: the time to DDP's final loss (within 1%) is read off each
curve, ratios are per seed against that seed's DDP, a case that never gets there says so, and the goals are
judged from the rows (best pycomm method at 100 Mbit/s, quantized mbsgd against its ceiling, DiLoCo against
torchft's); apps.train's curve has its evaluations taken out of the clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import nodes
from benchmarks.nodes_cases import CASES, apps_curve


def run(curve: list[tuple[int, float, float]], nbytes: float = 1e6) -> dict:
    return {"curve": curve, "train_s": curve[-1][1], "wall_s": curve[-1][1] + 10, "bytes_across": nbytes}


def test_time_to_target_and_ratios_against_ddp():
    runs = {
        "ddp": [run([(10, 1.0, 0.9), (20, 2.0, 0.50)])],
        "hsdp+plsgd": [run([(10, 0.2, 0.6), (20, 0.4, 0.504)], 1e5)],  # 0.504 <= 0.50 x 1.01
        "qsr": [run([(10, 0.3, 0.8), (20, 0.6, 0.6)], 2e5)],
    }
    rows = {r["case"]: r for r in nodes.summarise("100mbit", runs, samples_per_step=64)}
    assert rows["ddp"]["to_target_s"] == 2.0 and rows["ddp"]["to_target_vs_ddp"] == 1.0
    assert rows["hsdp+plsgd"]["to_target_s"] == 0.4 and rows["hsdp+plsgd"]["to_target_vs_ddp"] == pytest.approx(0.2)
    assert rows["hsdp+plsgd"]["bytes_vs_ddp"] == pytest.approx(0.1)
    assert rows["hsdp+plsgd"]["samples_per_s"] == pytest.approx(20 * 64 / 0.4)
    assert rows["qsr"]["to_target_s"] is None and rows["qsr"]["reached"] == "0/1"
    [best] = nodes.goals(list(rows.values()))
    assert best["goal"].startswith("100mbit: best pycomm method (hsdp+plsgd)"), best
    assert best["ratio"] == pytest.approx(0.2) and best["met"] is True


def test_over_seeds_a_seed_that_never_reached_the_target_counts_as_never():
    """Medians over 3 seeds: reaching DDP's loss in 2 of them gives the slower of the two; in 1 of 3, none; the
    loss keeps its spread."""
    ddp = [run([(10, 1.0, 0.9), (20, 2.0, 0.50)]) for _ in range(3)]
    fast, never = run([(10, 0.2, 0.5), (20, 0.4, 0.5)]), run([(10, 0.2, 0.9), (20, 0.4, 0.8)])
    runs = {"ddp": ddp, "qsr": [fast, run([(10, 0.3, 0.5), (20, 0.6, 0.5)]), never], "lsgd": [fast, never, never]}
    rows = {r["case"]: r for r in nodes.summarise("100mbit", runs, samples_per_step=64)}
    assert rows["qsr"]["reached"] == "2/3" and rows["qsr"]["to_target_vs_ddp"] == pytest.approx(0.15)
    assert rows["lsgd"]["reached"] == "1/3" and rows["lsgd"]["to_target_vs_ddp"] is None
    lsgd = rows["lsgd"]
    assert (lsgd["final_loss_min"], lsgd["final_loss"], lsgd["final_loss_max"]) == (0.5, 0.8, 0.8)


def test_torchft_cases_are_refused_where_a_node_has_several_ranks():
    """torchft syncs rank k of each replica group with rank k of the others only; the worker wraps nothing
    inside a node, so with 2 ranks per node it would train two separate models."""
    with pytest.raises(SystemExit):
        nodes.main(["--ranks-per-node", "2", "--cases", "ddp", "torchft-diloco", "--from-log", "/nonexistent"])


def test_apps_train_cases_pay_the_preemption_agreement_and_the_peers_do_not():
    assert CASES["mbsgd"].agreements_per_step == 1.0 and CASES["diloco-apps"].agreements_per_step == 1 / 24
    assert CASES["ddp"].agreements_per_step == CASES["diloco-bare"].agreements_per_step == 0.0
    assert CASES["mbsgd-nocomm"].agreements_per_step == CASES["torchft-diloco"].agreements_per_step == 0.0


def test_quantized_mbsgd_is_judged_against_its_ceiling_and_diloco_against_torchft():
    rows = [
        {
            "rate": rate,
            "case": c,
            "samples_per_s": s,
            "final_loss": loss,
            "final_loss_max": worst,
            "bytes_across": b,
            "to_target_vs_ddp": None,
        }
        for rate, c, s, loss, worst, b in [
            ("1gbit", "mbsgd+int8", 850.0, 0.1, 0.1, 1.0),
            ("1gbit", "mbsgd-nocomm", 1000.0, 0.1, 0.1, 0.0),
            # 5% behind torchft's median, but no worse than its worst seed: the same loss within seed noise
            ("1gbit", "diloco-torchft-settings", 900.0, 0.105, 0.12, 90.0),
            ("1gbit", "torchft-diloco", 800.0, 0.1, 0.11, 100.0),
            ("1gbit", "diloco-bare", 1200.0, 0.099, 0.1, 80.0),  # the like-for-like case: torchft's bare loop
            # one seed each: no spread to hide in, 5% behind is not the same loss
            ("100mbit", "diloco-bare", 1200.0, 0.105, 0.105, 80.0),
            ("100mbit", "torchft-diloco", 800.0, 0.1, 0.1, 100.0),
        ]
    ]
    got = {g["goal"]: (round(g["ratio"], 3), g["met"]) for g in nodes.goals(rows)}
    assert got["1gbit: mbsgd+int8 samples/s vs its ceiling (no communication)"] == (0.85, False)
    ours = "1gbit: pycomm DiLoCo (diloco-torchft-settings) with torchft's settings"
    assert got[f"{ours}, final loss vs torchft's"] == (1.05, True)
    assert got[f"{ours}, bytes across vs torchft's"] == (0.9, True)
    assert got[f"{ours}, samples/s vs torchft's"] == (1.125, True)
    bare = "1gbit: pycomm DiLoCo (diloco-bare) with torchft's settings"
    assert got[f"{bare}, final loss vs torchft's"] == (0.99, True)
    assert got[f"{bare}, samples/s vs torchft's"] == (1.5, True)
    assert got["100mbit: pycomm DiLoCo (diloco-bare) with torchft's settings, final loss vs torchft's"] == (1.05, False)
    assert not any("diloco-apps" in g for g in got)  # a case not run is not judged


def test_apps_train_curves_leave_the_evaluations_out(tmp_path: Path):
    steps = [{"step": s, "time": t} for s, t in [(1, 0.1), (2, 0.2), (3, 1.3), (4, 1.4)]]  # eval at 2: 1.0 s
    evals = [{"step": 2, "time": 1.2, "loss": 0.7}, {"step": 4, "time": 9.0, "loss": 0.5}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    curve, train_s = apps_curve(tmp_path)
    assert curve == [(2, 0.2, 0.7), (4, pytest.approx(0.4), 0.5)] and train_s == pytest.approx(0.4)
