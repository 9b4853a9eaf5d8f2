"""Compositions on 4 real ranks (one launch, tests/algorithms/workers/composition.py): pipeline x ZeRO-1/2/3 and
pipeline x mbsgd / plsgd / qsr / easgd / lsgd / diloco on pp2 x dp2, ZeRO inside dp_shard2 with plsgd / qsr /
easgd / diloco (streaming over ZeRO-3) across dp_replicate2, and diloco given a 2-D mesh (over mesh["dp"]), each
against its single-process reference every step (rtol 1e-5), bytes per mesh
dimension against their formulas, and the refused pairs naming themselves. In-process: the pairs table's
checks and the stage split's refusal of tied parameters across stages."""

from __future__ import annotations

import pytest
import torch

import algorithms
from algorithms import composition
from algorithms.pipeline.partition import check_untied, layers_of
from tests.algorithms.runs import case

PIPELINED = [
    f"pp_{m}"
    for m in ("zero1", "zero2", "zero3", "zero2_replicate", "mbsgd", "plsgd", "qsr", "easgd", "lsgd", "diloco")
]
ACROSS = [
    "zero3_plsgd",
    "zero3_qsr",
    "zero3_easgd",
    "zero1_plsgd",
    "zero2_plsgd",
    "zero3_diloco_streaming",
    "zero2_diloco",
    "mesh_diloco",
]
REFUSED = ["refuse_mbsgd_over_zero2", "refuse_lsgd_over_zero2", "refuse_pipeline_lsgd_proxy", "refuse_pipeline_lapsgd"]


@pytest.mark.mpi
@pytest.mark.parametrize("name", PIPELINED + ACROSS + REFUSED)
def test_composition_on_4_ranks(name: str) -> None:
    for rank, res in enumerate(case("composition", 4, name)):
        assert res["ok"], f"rank {rank}: {res}"


def test_pairs_are_decided_by_declarations() -> None:
    assert set(composition.across_shard_methods()) >= {"plsgd", "qsr", "easgd", "diloco"}
    for name in ("lapsgd", "asyncps", "ssp"):
        with pytest.raises(composition.CompositionError, match=f"pipeline x {name}"):
            composition.check_pipeline(algorithms.lookup(name), {})
    composition.check_pipeline(algorithms.lookup("lsgd"), {"leader_metric": "loss"})
    with pytest.raises(composition.CompositionError, match="leader_metric='proxy'"):
        composition.check_pipeline(algorithms.lookup("lsgd"), {"leader_metric": "proxy"})


def test_tied_parameters_across_stages_are_refused() -> None:
    emb, head = torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False)
    head.weight = emb.weight
    layers = layers_of(torch.nn.Sequential(emb, torch.nn.Tanh(), head))
    check_untied(layers, [0, 3])  # one stage: fine
    with pytest.raises(ValueError, match="tied parameters must sit on one stage"):
        check_untied(layers, [0, 2, 3])
