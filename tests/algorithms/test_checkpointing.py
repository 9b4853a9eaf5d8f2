"""algorithms.checkpointing: the atomic write survives a kill at any moment (the previous file, or ZeRO's
previous sharded checkpoint, stays loadable); file placement over a parallel layout (pp x dp_replicate x
dp_shard, through a stand-in with a Mesh's .shape and .coords) names each file once and resumes on
other data-parallel sizes exactly where the state layout allows; a user's own script loads an identical
state written on another number of ranks, and is told why not for the other layouts; every file is
read weights only, through the one loader (tests/checkpoint_payload.py's crafted files are refused unrun)."""

from __future__ import annotations

import itertools
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import algorithms
import pycomm
from algorithms import checkpointing, traits
from algorithms.checkpointing import CheckpointError, Placement, atomic
from algorithms.checkpointing.placement import ONCE, to_read, written_by
from tests.checkpoint_payload import REFUSED, plant
from tests.launch import ROOT, mpirun, worker_env

STEMS = {"iter": ONCE, "model": traits.IDENTICAL, "local": traits.PER_RANK, "optim": traits.SHARDED}


@dataclass
class StandInMesh:
    """What the checkpointer reads from a pycomm.Mesh: sizes and this rank's coordinates."""

    shape: dict[str, int]
    coords: dict[str, int]


def _placements(pp: int, dp_replicate: int, dp_shard: int) -> list[Placement]:
    """Every rank's placement, in rank order (dp_shard innermost)."""
    shape = {"pp": pp, "dp_replicate": dp_replicate, "dp_shard": dp_shard}
    return [
        Placement.of(StandInMesh(shape, {"pp": i, "dp_replicate": j, "dp_shard": k}), 0, 0)
        for i, j, k in itertools.product(range(pp), range(dp_replicate), range(dp_shard))
    ]


def _kill_mid_write(script: str, *args: str) -> None:
    """Run `script` (which prints "wrote" once it is inside a write) and SIGKILL it there."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=worker_env(),
    )
    try:
        assert proc.stdout.readline().strip() == "wrote"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_kill_during_an_atomic_write_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    atomic.save(path, {"version": 1})
    _kill_mid_write(f"""
        import time
        from algorithms.checkpointing import atomic
        def half(f):
            f.write(b"x" * 4096); f.flush(); print("wrote", flush=True); time.sleep(60)
        atomic.replace_atomically(__import__("pathlib").Path({str(path)!r}), half)
    """)
    assert torch.load(path, weights_only=True) == {"version": 1}
    atomic.save(path, {"version": 2})  # the stray temporary of the killed writer is in nobody's way
    assert torch.load(path, weights_only=True) == {"version": 2}
    strays = set(tmp_path.glob(".state.pt.tmp-*"))

    def full_disk(f: object) -> None:
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic.replace_atomically(path, full_disk)
    assert torch.load(path, weights_only=True) == {"version": 2}
    assert set(tmp_path.iterdir()) == {path} | strays  # a failed write removes its own temporary


def test_a_kill_during_zeros_save_leaves_its_previous_checkpoint(tmp_path: Path) -> None:
    """One rank: save at step 1, then a process killed while it writes step 2's over it."""
    script = f"""
        import sys, time, torch, pycomm, algorithms
        from algorithms.checkpointing import atomic
        pycomm.init()
        model = torch.nn.Linear(4, 3)
        opt = algorithms.CommOptimizer(torch.optim.AdamW(model.parameters()), algorithm="zero2", model=model)
        def step():
            model(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
        step()
        if sys.argv[1:] != ["kill"]:
            opt.save_sharded_state_dict({str(tmp_path / "ckpt")!r}); print("saved", flush=True); sys.exit()
        step()
        real = atomic.write_durably
        def stuck(path, write):
            real(path, write); print("wrote", flush=True); time.sleep(60)
        atomic.write_durably = stuck
        opt.save_sharded_state_dict({str(tmp_path / "ckpt")!r})
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, env=worker_env(), check=True)
    _kill_mid_write(script, "kill")
    pycomm.init()
    model = torch.nn.Linear(4, 3)
    opt = algorithms.CommOptimizer(torch.optim.AdamW(model.parameters()), algorithm="zero2", model=model)
    opt.load_sharded_state_dict(tmp_path / "ckpt")
    assert opt.steps == 1
    assert any(p.name.startswith(".ckpt.tmp") for p in tmp_path.iterdir())  # the killed save's, never read


@pytest.mark.parametrize("pp, dp_replicate, dp_shard", [(1, 1, 4), (2, 1, 2), (2, 2, 2), (1, 2, 3)])
def test_each_file_has_one_writer_and_a_one_stage_run_keeps_the_stub_names(
    pp: int, dp_replicate: int, dp_shard: int
) -> None:
    ranks = _placements(pp, dp_replicate, dp_shard)
    written = [
        (stem, written_by(stem, kind, at, rank)) for rank, at in enumerate(ranks) for stem, kind in STEMS.items()
    ]
    files = [f for _, f in written if f is not None]
    assert len(files) == len(set(files)), files
    per_stage = {stem: sum(1 for s, f in written if s == stem and f) for stem in STEMS}
    assert per_stage == {"iter": 1, "model": pp, "local": pp * dp_replicate * dp_shard, "optim": pp * dp_shard}
    if pp == 1:
        assert {"iter.pt", "model.pt", "local.pt", "optim.pt"} <= set(files) and "optim.rank1.pt" in files
    else:
        assert {"model.pp0.pt", "model.pp1.pt", "optim.pp1.rank1.pt", "iter.pt"} <= set(files)


def test_resume_reads_what_the_layouts_allow_and_names_what_they_do_not() -> None:
    saved = Placement.saved({"pp": 2, "dp_replicate": 1, "dp_shard": 4})
    for at in _placements(2, 2, 3):  # same stages, other data-parallel sizes
        stage = at.stage
        assert to_read("model", traits.IDENTICAL, saved, at, "ckpt") == [f"model.pp{stage}.pt"]
        assert to_read("optim", traits.SHARDED, saved, at, "ckpt") == [
            f"model.pp{stage}.pt".replace("model", "optim")
        ] + [f"optim.pp{stage}.rank{k}.pt" for k in (1, 2, 3)]
        with pytest.raises(
            CheckpointError,
            match=r"ckpt holds local per rank .* for pp=2 stages x 4 data-parallel "
            r"rank\(s\); this run has pp=2 stages x 6 data-parallel rank\(s\) "
            r"\(dp_replicate 2 x dp_shard 3\).*resume with 4",
        ):
            to_read("local", traits.PER_RANK, saved, at, "ckpt")
        assert to_read("local", traits.PER_RANK, saved, at, "ckpt", resized_ok=True) == [f"local.pp{stage}.pt"]
    same = _placements(2, 2, 2)[5]  # 4 data-parallel ranks again (2 x 2): rank d reads rank d's
    assert to_read("local", traits.PER_RANK, saved, same, "ckpt") == ["local.pp1.rank1.pt"]
    for stem, kind in STEMS.items():
        if kind != ONCE:
            with pytest.raises(
                CheckpointError,
                match=r"ckpt was written with pp=2 pipeline stage\(s\); this run has "
                r"pp=1.*resume with pp=2",
            ):
                to_read(stem, kind, saved, _placements(1, 1, 4)[0], "ckpt")
    assert to_read("iter", ONCE, saved, _placements(1, 1, 1)[0], "ckpt") == ["iter.pt"]


def test_a_directory_that_is_not_a_checkpoint_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    from apps.dist import Dist  # a one-process stand-in for the ranks' barrier

    with pytest.raises(CheckpointError, match="is not a checkpoint .*give a new or an empty directory"):
        checkpointing.save(tmp_path, "mine", {"x": (ONCE, 1)}, Dist())
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    path = checkpointing.save(tmp_path, "ckpt", {"x": (ONCE, 1)}, Dist())
    assert checkpointing.read(checkpointing.read_manifest(path), "x", Placement.of(None, 0, 1)) == 1


@pytest.mark.mpi
def test_a_users_state_on_another_number_of_ranks(tmp_path: Path) -> None:
    """States written by 2 ranks (tests/algorithms/workers/resize_state.py), loaded here on 1: mbsgd's
    identical state loads (its per-rank residuals start afresh); plsgd's per-rank and zero2's per-rank
    shard are refused saying what to do; zero2's sharded state into plsgd names zero2."""
    mpirun(2, "tests.algorithms.workers.resize_state", str(tmp_path), timeout=240)
    pycomm.init()

    def build(name: str, **options: object) -> tuple[torch.nn.Module, algorithms.CommOptimizer]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        return model, algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), algorithm=name, model=model, **options
        )

    saved = torch.load(tmp_path / "mbsgd.rank1.pt", weights_only=False)
    model, opt = build("mbsgd", codec="int8")
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    assert opt.steps == 3 and torch.equal(
        opt.state_dict()["optimizer"]["state"][0]["momentum_buffer"],
        saved["opt"]["optimizer"]["state"][0]["momentum_buffer"],
    )
    assert not opt.state_dict()["channel"]["residuals"]
    model(torch.ones(2, 4)).sum().backward()
    opt.step()  # trains on
    with pytest.raises(
        ValueError,
        match=r"state was written on 2 ranks, this world has 1: plsgd's ranks hold "
        r"different states \(state_layout per_rank\).*resume with 2 ranks",
    ):
        build("plsgd")[1].load_state_dict(torch.load(tmp_path / "plsgd.rank0.pt", weights_only=False))
    with pytest.raises(
        ValueError,
        match=r"zero2's state_dict\(\) holds this rank's shard; save "
        r"sharded_state_dict\(\).*load_sharded_state_dict",
    ):
        build("zero2")[1].load_state_dict(torch.load(tmp_path / "zero2.rank0.pt", weights_only=False))
    sharded = torch.load(tmp_path / "zero2.sharded.rank0.pt", weights_only=False)
    with pytest.raises(
        ValueError,
        match=r"state was written by algorithm 'zero2' as a sharded_state_dict\(\)"
        r".*this is 'plsgd'",
    ):
        build("plsgd")[1].load_state_dict(sharded)


def test_zeros_sharded_checkpoint_refuses_a_crafted_shard_and_runs_none_of_it(tmp_path: Path) -> None:
    """save_sharded_state_dict's directory (every file it wrote) and the shard-<r>-of-<N>.pt files of before it."""
    pycomm.init()
    model = torch.nn.Linear(4, 3)
    opt = algorithms.CommOptimizer(torch.optim.AdamW(model.parameters()), algorithm="zero2", model=model)
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.save_sharded_state_dict(tmp_path / "saved")
    marker = tmp_path / "ran"
    files = [p.name for p in (tmp_path / "saved").iterdir() if p.name != checkpointing.MANIFEST]
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for directory, name in [(tmp_path / f"crafted-{name}", name) for name in files] + [(legacy, "shard-0-of-1.pt")]:
        if directory != legacy:
            shutil.copytree(tmp_path / "saved", directory)
        plant(directory / name, marker)
        with pytest.raises(CheckpointError, match=rf"{re.escape(str(directory / name))} {REFUSED}"):
            opt.load_sharded_state_dict(directory)
        assert not marker.exists(), f"{directory / name}: the crafted file's code ran"
    assert files, "save_sharded_state_dict wrote no file"


def test_every_checkpoint_read_goes_through_the_weights_only_loader() -> None:
    """torch.load is called in one place (algorithms/checkpointing/loading.py), so no reader can forget
    weights_only=True; nothing unpickles with pickle itself."""
    callers = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for layer in ("pycomm", "algorithms", "apps")
        for path in sorted((ROOT / layer).rglob("*.py"))
        for line in path.read_text().splitlines()
        if re.search(r"\btorch\.load\(|\bpickle\.loads?\(|weights_only\s*=\s*False", line)
    ]
    assert callers == [
        'algorithms/checkpointing/loading.py: return torch.load(path, map_location="cpu", weights_only=True)'
    ], callers
