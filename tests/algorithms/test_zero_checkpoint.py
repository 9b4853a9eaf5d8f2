"""ZeRO checkpoints: a sharded checkpoint written on 4 ranks loads on 2 and on 3 with an identical
full_state_dict(); same-N resume through state_dict() is bit-exact; another model's checkpoint is
refused naming the first mismatched parameter. zero1 with staleness_bound=2 too (a checkpoint drains
the steps in flight, so it reshards as zero1's). One 4-rank launch runs every algorithm in turn
(tests/algorithms/workers/zero_checkpoint.py), loading on 2 and 3 ranks through communicators split from
the 4 once every save is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.algorithms.runs import case

ALGORITHMS = ["zero1", "zero2", "zero3", "zero1-k2"]  # zero1-k2: staleness_bound=2, steps in flight
_ALL = ",".join(ALGORITHMS)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The directory holding every algorithm's checkpoint (CKPT_ROOT/<algorithm>), written on 4 ranks."""
    return str(tmp_path_factory.mktemp("zero-ckpt"))


def _check(name: str, root: str, algorithm: str, ranks: int = 4) -> None:
    """Case `name` of `algorithm` passed on each of the `ranks` ranks that ran it (those of its communicator)."""
    results = case("zero_checkpoint", 4, f"{name}_{algorithm}", root, _ALL)
    inside = [(rank, res) for rank, res in enumerate(results) if not res.get("outside")]
    assert [res.get("group", 4) for _, res in inside] == [ranks] * len(inside) and len(inside) >= ranks, results
    for rank, res in inside:
        assert res["ok"], f"{algorithm} rank {rank}: {res}"


def _saved(root: str, algorithm: str) -> None:
    """`algorithm`'s sharded checkpoint written on 4 ranks, its files checked."""
    _check("save", root, algorithm)
    written = sorted(p.name for p in (Path(root) / algorithm / "shards").iterdir())
    assert written == ["manifest.json", "sharded_state.pt"] + [f"sharded_state.rank{r}.pt" for r in (1, 2, 3)]


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resume_same_world_is_bit_exact(algorithm: str, root: str) -> None:
    _saved(root, algorithm)
    _check("resume", root, algorithm)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reshard_4_to_n(algorithm: str, n: int, root: str) -> None:
    _saved(root, algorithm)
    _check(f"load{n}", root, algorithm, ranks=n)


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_other_models_checkpoint_is_refused(algorithm: str, root: str) -> None:
    _saved(root, algorithm)
    _check("other_model", root, algorithm, ranks=2)
