"""ZeRO checkpoints: a sharded checkpoint written on 4 ranks loads on 2 and on 3 with an identical
full_state_dict(); same-N resume through state_dict() is bit-exact; another model's checkpoint is
refused naming the first mismatched parameter. zero1 with staleness_bound=2 too (a checkpoint drains
the steps in flight, so it reshards as zero1's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.algorithms.runs import case

ALGORITHMS = ["zero1", "zero2", "zero3", "zero1-k2"]  # zero1-k2: staleness_bound=2, steps in flight


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """{algorithm: directory of its sharded checkpoint written on 4 ranks}."""
    out = {}
    for algorithm in ALGORITHMS:
        directory = str(tmp_path_factory.mktemp(f"{algorithm}-ckpt"))
        for rank, res in enumerate(case("zero_checkpoint", 4, "save", "save", directory, algorithm)):
            assert res["ok"], f"rank {rank}: {res}"
        written = sorted(p.name for p in (Path(directory) / "shards").iterdir())
        assert written == ["manifest.json", "sharded_state.pt"] + [f"sharded_state.rank{r}.pt" for r in (1, 2, 3)]
        out[algorithm] = directory
    return out


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resume_same_world_is_bit_exact(algorithm: str, saved: dict[str, str]) -> None:
    for rank, res in enumerate(case("zero_checkpoint", 4, "resume", "save", saved[algorithm], algorithm)):
        assert res["ok"], f"rank {rank}: {res}"


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reshard_4_to_n(algorithm: str, n: int, saved: dict[str, str]) -> None:
    for rank, res in enumerate(case("zero_checkpoint", n, "load", "load", saved[algorithm], algorithm)):
        assert res["ok"], f"rank {rank}: {res}"


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_other_models_checkpoint_is_refused(algorithm: str, saved: dict[str, str]) -> None:
    for rank, res in enumerate(case("zero_checkpoint", 2, "other_model", "load", saved[algorithm], algorithm)):
        assert res["ok"], f"rank {rank}: {res}"
