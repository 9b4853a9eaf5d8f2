"""Atomic checkpoints: a crash mid-write leaves the previous one intact; corrupt ones give clear errors;
identical files are stored once (hard links) and pruning never takes a file a kept checkpoint needs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import algorithms
from algorithms import traits
from algorithms.checkpointing import Placement, atomic
from apps import checkpoint
from apps.checkpoint import CheckpointError, IterState
from apps.config.schema import CheckpointConfig
from apps.dist import Dist
from apps.loop_support import Checkpointer, state_kinds
from tests.apps import runs

ROOT = Path(__file__).resolve().parents[2]
ONE = Placement.of(None, 0, 1)


PER_RANK = {stem: traits.PER_RANK for stem in checkpoint.STEMS}


def _save(
    directory: Path, step: int, value: float, per_rank: bool = False, kind: str = "", elapsed: float = 0.0
) -> Path:
    state = IterState(
        step=step, epoch=1, segment=2, start_idx=10, end_idx=20, best_loss=0.5, extra={"elapsed": elapsed}
    )
    name = f"ckpt.best.step{step:08d}" if kind == "best" else f"ckpt.step{step:08d}{kind}"
    return checkpoint.save(
        directory,
        name,
        Dist(),
        state,
        {"w": torch.full((1 << 16,), value)},
        {"opt": value},
        {"last_epoch": step},
        PER_RANK if per_rank else None,
    )


def _load(path: Path, rank: int = 0, size: int = 1) -> checkpoint.Loaded:
    return checkpoint.load(path, Placement.of(None, rank, size))


def _disk_bytes(*paths: Path) -> int:
    """Bytes the files under `paths` take on disk, each inode counted once."""
    inodes = {}
    for path in paths:
        for f in path.rglob("*"):
            if f.is_file():
                st = f.stat()
                inodes[(st.st_dev, st.st_ino)] = st.st_size
    return sum(inodes.values())


def test_layout_round_trip_and_latest(tmp_path: Path) -> None:
    _save(tmp_path, 5, 1.0)
    path = _save(tmp_path, 10, 2.0)
    assert sorted(p.name for p in path.iterdir()) == [
        "iter_state_dict.pt",
        "lr_state_dict.pt",
        "manifest.json",
        "model_state_dict.pt",
        "optim_state_dict.pt",
    ]
    loaded = _load(path)
    state = loaded.state
    assert (state.step, state.epoch, state.segment, state.start_idx, state.end_idx, state.best_loss) == (
        10,
        1,
        2,
        10,
        20,
        0.5,
    )
    assert torch.equal(loaded.model["w"], torch.full((1 << 16,), 2.0))
    assert loaded.optim == {"opt": 2.0} and loaded.lr == {"last_epoch": 10}
    assert checkpoint.resolve("auto", tmp_path, "ckpt") == path
    assert checkpoint.resolve("auto", tmp_path / "none", "ckpt") is None


def test_failure_mid_write_leaves_previous_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _save(tmp_path, 5, 1.0)
    calls = {"n": 0}
    real_save = torch.save

    def failing_save(obj, f, *a, **k):  # the second file of the next checkpoint fails (disk full, crash)
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError):
        _save(tmp_path, 10, 2.0)
    monkeypatch.undo()
    assert checkpoint.resolve("auto", tmp_path, "ckpt") == good
    assert not (tmp_path / "ckpt.step00000010").exists()
    assert torch.equal(_load(good).model["w"], torch.full((1 << 16,), 1.0))
    _save(tmp_path, 15, 3.0)
    checkpoint.prune(tmp_path, "ckpt", keep_last=2)  # the crashed temporary is cleaned up
    assert not list(tmp_path.glob(".*.tmp")) and good.exists()


def test_process_killed_during_save_leaves_previous_intact(tmp_path: Path) -> None:
    good = _save(tmp_path, 5, 1.0)
    script = textwrap.dedent(f"""
        import sys, time, torch
        sys.path.insert(0, {str(ROOT)!r})
        from apps import checkpoint
        from apps.checkpoint import IterState
        from apps.dist import Dist
        real = torch.save
        def slow(obj, f, *a, **k):
            real(obj, f, *a, **k); print("wrote", flush=True); time.sleep(30)
        torch.save = slow
        checkpoint.save(__import__("pathlib").Path({str(tmp_path)!r}), "ckpt.step00000010", Dist(),
                        IterState(step=10), {{"w": torch.zeros(1 << 20)}}, {{}}, {{}})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "wrote"  # killed with one file of the new checkpoint written
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert checkpoint.resolve("auto", tmp_path, "ckpt") == good
    assert _load(good).state.step == 5


def test_corrupt_or_missing_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    older = _save(tmp_path, 5, 1.0)
    newer = _save(tmp_path, 10, 2.0)
    data = (newer / "model_state_dict.pt").read_bytes()
    (newer / "model_state_dict.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        CheckpointError,
        match=r"model_state_dict.pt is corrupt: \d+ bytes where manifest.json "
        r"says \d+.*older complete checkpoints.*step00000005",
    ):
        checkpoint.restore("auto", tmp_path, "ckpt", ONE)
    assert _load(older).state.step == 5  # untouched
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        checkpoint.restore(str(tmp_path / "missing"), tmp_path, "ckpt", ONE)
    (older / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        _load(older)


def test_a_failed_resume_suggests_only_checkpoints_without_a_copy_of_the_damaged_file(tmp_path: Path) -> None:
    older = _save(tmp_path, 5, 1.0)
    best = _save(tmp_path, 10, 2.0, kind="best")
    _save(tmp_path, 10, 2.0)  # a periodic checkpoint: it shares the damaged file, so it is not suggested
    preempt = _save(tmp_path, 10, 2.0, kind=".preempt")  # the newest: auto resumes from it
    with open(preempt / "model_state_dict.pt", "r+b") as f:  # one bit flipped in place: every link sees it
        f.seek(-1, os.SEEK_END)
        last = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last ^ 1]))
    with pytest.raises(CheckpointError, match=r"model_state_dict.pt is corrupt: its SHA-256 differs") as e:
        checkpoint.restore("auto", tmp_path, "ckpt", ONE)
    suggested = str(e.value).split("older complete checkpoints (use --resume PATH): ")[1].split(", ")
    assert suggested == [str(older), str(best)], suggested  # not the periodic one: it holds the same copy
    assert [_load(Path(p)).state.step for p in suggested] == [5, 10]


def test_per_rank_state_needs_the_same_world_size(tmp_path: Path) -> None:
    path = _save(tmp_path, 5, 1.0, per_rank=True)
    with pytest.raises(
        CheckpointError,
        match=r"holds model_state_dict per rank \(each rank's differs\) for 1 "
        r"data-parallel rank\(s\); this run has 2 .*resume with 1",
    ):
        _load(path, 1, 2)
    identical = _save(tmp_path, 6, 1.0)  # identical state: any number of ranks
    assert torch.equal(_load(identical, 2, 3).model["w"], torch.full((1 << 16,), 1.0))


def test_prune_keeps_newest_periodic_best_and_newer_preempt(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        _save(tmp_path, step, float(step))
    for name in (
        "ckpt.best.step00000001",
        "ckpt.best.step00000002",
        "ckpt.step00000002.preempt",
        "ckpt.step00000004.preempt",
    ):
        checkpoint.save(tmp_path, name, Dist(), IterState(), {}, {}, {})
    checkpoint.prune(tmp_path, "ckpt", keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt.best.step00000002",
        "ckpt.step00000002",
        "ckpt.step00000003",
        "ckpt.step00000004.preempt",
    ]


@pytest.mark.mpi
def test_collective_save_with_per_rank_state_under_mpirun(tmp_path: Path) -> None:
    from tests.launch import mpirun

    out = mpirun(2, "tests.apps.workers.checkpoint_ranks", str(tmp_path), timeout=180).stdout
    # Ranks' output can interleave mid-line under mpirun: match the reports, not whole lines.
    assert sorted(re.findall(r"rank (\d+) ok", out)) == ["0", "1"], out


def test_corrupt_per_rank_file_names_the_file_and_the_damage(tmp_path: Path) -> None:
    state = IterState(step=5, world_size=2)
    path = checkpoint.save(
        tmp_path,
        "ckpt.step00000005",
        Dist(),
        state,
        {"w": torch.ones(8)},
        {"opt": 1.0},
        {},
        {"optim_state_dict": traits.PER_RANK},
        Placement.of(None, 0, 2),
    )
    good = (path / "optim_state_dict.pt").read_bytes()  # rank 1's copy, as a second rank would write it
    rank_file = path / "optim_state_dict.rank1.pt"
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][rank_file.name] = manifest["files"]["optim_state_dict.pt"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    rank_file.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit flipped on disk
    with pytest.raises(CheckpointError, match=r"optim_state_dict.rank1.pt is corrupt: its SHA-256 differs"):
        _load(path, 1, 2)
    rank_file.write_bytes(good[:100])
    with pytest.raises(CheckpointError, match=r"optim_state_dict.rank1.pt is corrupt: 100 bytes where"):
        _load(path, 1, 2)
    rank_file.unlink()
    with pytest.raises(CheckpointError, match=r"optim_state_dict.rank1.pt is corrupt: it is missing"):
        _load(path, 1, 2)
    assert _load(path, 0, 2).state.step == 5  # rank 0's files are intact


def test_resume_names_a_file_or_a_directory_of_checkpoints(tmp_path: Path) -> None:
    path = _save(tmp_path, 5, 1.0)
    assert checkpoint.resolve(str(path / "model_state_dict.pt"), tmp_path, "ckpt") == path  # a file of it: works
    assert checkpoint.restore(str(path / "manifest.json"), tmp_path, "ckpt", ONE).path == path
    stray = tmp_path / "model.pt"
    stray.write_bytes(b"x")
    with pytest.raises(
        CheckpointError,
        match=r"model.pt is a file, not a checkpoint; expected a checkpoint "
        r"directory holding manifest.json .* or auto",
    ):
        checkpoint.resolve(str(stray), tmp_path, "ckpt")
    with pytest.raises(
        CheckpointError,
        match=r"directory without manifest.json; it holds the checkpoints "
        r"ckpt.step00000005: pass one",
    ):
        checkpoint.resolve(str(tmp_path), tmp_path, "ckpt")


def test_periodic_and_preempt_at_one_step_share_their_files_and_the_best_keeps_its_own(tmp_path: Path) -> None:
    best = _save(tmp_path, 10, 2.0, kind="best", elapsed=1.0)
    periodic = _save(tmp_path, 10, 2.0, elapsed=2.0)
    preempt = _save(tmp_path, 10, 2.0, kind=".preempt", elapsed=3.0)
    for name in ("model_state_dict.pt", "optim_state_dict.pt", "lr_state_dict.pt"):
        inodes = {(p / name).stat().st_ino for p in (periodic, preempt)}
        assert len(inodes) == 1 and (periodic / name).stat().st_nlink == 2, name
        # the run's result survives damage to the resume chain's copy, and the other way round
        assert (best / name).stat().st_ino not in inodes and (best / name).stat().st_nlink == 1, name
    # iter_state_dict.pt differs (elapsed time); the model, 256 KiB, is stored twice, not three times
    one = _disk_bytes(best)
    assert _disk_bytes(best, periodic, preempt) < 2 * one + 2 * 4096, (one, _disk_bytes(best, periodic, preempt))
    for p in (best, periodic, preempt):
        assert torch.equal(_load(p).model["w"], torch.full((1 << 16,), 2.0))
    other = _save(tmp_path, 11, 3.0)
    assert (other / "model_state_dict.pt").stat().st_nlink == 1  # different bytes are never linked


def test_identical_per_rank_copies_are_stored_once(tmp_path: Path) -> None:
    path = _save(tmp_path, 5, 1.0, per_rank=True)  # one process: every rank's copy would be rank 0's
    assert sorted(p.name for p in path.iterdir()) == [
        "iter_state_dict.pt",
        "lr_state_dict.pt",
        "manifest.json",
        "model_state_dict.pt",
        "optim_state_dict.pt",
    ]
    identical, per_rank = traits.IDENTICAL, traits.PER_RANK
    mbsgd, plsgd = algorithms.lookup("mbsgd"), algorithms.lookup("plsgd")
    assert state_kinds(mbsgd, {}) == {"model_state_dict": identical, "optim_state_dict": identical}
    assert state_kinds(mbsgd, {"codec": "int8"}) == {"model_state_dict": identical, "optim_state_dict": per_rank}
    assert state_kinds(plsgd, {}) == {"model_state_dict": per_rank, "optim_state_dict": per_rank}
    assert state_kinds(None, {}) == {"model_state_dict": identical, "optim_state_dict": identical}  # bare torch


def test_keep_last_prunes_old_periodic_but_never_a_kept_checkpoints_files(tmp_path: Path) -> None:
    best = _save(tmp_path, 2, 2.0, kind="best")
    for step in range(1, 6):
        _save(tmp_path, step, float(step))
        checkpoint.prune(tmp_path, "ckpt", keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt.best.step00000002",
        "ckpt.step00000004",
        "ckpt.step00000005",
    ]
    # the periodic checkpoint the best shared its files with is gone; the best still verifies and loads
    assert (best / "model_state_dict.pt").stat().st_nlink == 1
    assert torch.equal(_load(best).model["w"], torch.full((1 << 16,), 2.0))
    with pytest.raises(ValueError, match=r"keep_last must be an integer >= 0.*got -1"):
        checkpoint.prune(tmp_path, "ckpt", keep_last=-1)
    with pytest.raises(ValueError, match=r"keep_last must be an integer >= 0.*got -2"):  # before any rank trains
        Checkpointer(CheckpointConfig(keep_last=-2), tmp_path, Dist(), torch.nn.Linear(1, 1), None, None)


def test_saving_a_step_again_replaces_it_and_keeps_links_of_others_valid(tmp_path: Path) -> None:
    best = _save(tmp_path, 3, 1.0, kind="best")
    first = _save(tmp_path, 3, 1.0)
    again = _save(tmp_path, 3, 1.0, elapsed=9.0)  # after a resume from an older checkpoint
    assert again == first and _load(again).state.extra["elapsed"] == 9.0
    assert _load(best).state.step == 3 and not list(tmp_path.glob(".*"))


@pytest.mark.mpi
def test_a_corrupt_per_rank_file_stops_every_rank_at_resume(tmp_path: Path) -> None:
    from tests.launch import mpirun

    out = mpirun(2, "tests.apps.workers.resume_corrupt", str(tmp_path), timeout=120).stdout
    assert sorted(re.findall(r"rank (\d+) ok", out)) == ["0", "1"], out


@pytest.mark.mpi
def test_two_rank_mbsgd_run_writes_the_model_once(tmp_path: Path) -> None:
    runs.run(
        runs.args(tmp_path, "mb", "mbsgd", 2, "-o", "train.max_steps=20", "-o", "train.eval_every_epochs=0.01"),
        timeout=400,
    )
    ckpts = tmp_path / "mb" / "checkpoints"
    names = sorted(p.name for p in ckpts.iterdir())
    assert names[-2:] == ["ckpt.step00000010", "ckpt.step00000020"], names
    for ckpt in ckpts.iterdir():  # no per-rank copies: the ranks' models and optimizer states are one
        assert sorted(p.name for p in ckpt.iterdir()) == [
            "iter_state_dict.pt",
            "lr_state_dict.pt",
            "manifest.json",
            "model_state_dict.pt",
            "optim_state_dict.pt",
        ], ckpt
    best = [p for p in ckpts.iterdir() if p.name.startswith("ckpt.best.")]
    assert len(best) == 1
    twin = ckpts / best[0].name.replace("best.", "")
    if twin.exists():  # the best was at a periodic step: its own copy, apart from the resume chain's
        assert (twin / "model_state_dict.pt").stat().st_ino != (best[0] / "model_state_dict.pt").stat().st_ino


@pytest.mark.mpi
def test_mbsgd_with_a_codec_resumes_each_ranks_residuals(tmp_path: Path) -> None:
    codec = ["-o", "algorithm.options={codec: int8}"]
    runs.run(runs.args(tmp_path, "straight", "mbsgd", 2, *codec), timeout=400)
    argv = runs.args(tmp_path, "cut", "mbsgd", 2, *codec)
    assert "preempted" in runs.preempt(argv, timeout=400).stdout
    [preempted] = (tmp_path / "cut" / "checkpoints").glob("*.preempt")
    # one model, but each rank's error-feedback residuals are its own
    assert (preempted / "optim_state_dict.rank1.pt").exists()
    assert not (preempted / "model_state_dict.rank1.pt").exists()
    runs.run(argv + ["--resume", "auto"], timeout=400)
    runs.assert_same(runs.final_params(tmp_path / "straight"), runs.final_params(tmp_path / "cut"))


def test_a_checkpoint_of_the_first_format_still_loads(tmp_path: Path) -> None:
    """Before algorithms.checkpointing: no layout in the manifest, per-rank stems and the position in steps
    of the writing world in iter_state_dict.pt."""
    path = tmp_path / "ckpt.step00000012"
    path.mkdir()
    legacy = {
        "epoch": 1,
        "segment": 2,
        "start_idx": 64,
        "end_idx": 96,
        "step_in_segment": 3,
        "step": 12,
        "best_loss": 0.5,
        "world_size": 2,
        "per_rank": ["model_state_dict", "optim_state_dict"],
        "reshardable": False,
        "extra": {},
    }
    for name, obj in (
        ("iter_state_dict", legacy),
        ("model_state_dict", {"w": torch.zeros(2)}),
        ("model_state_dict.rank1", {"w": torch.ones(2)}),
        ("optim_state_dict", {"r": 0}),
        ("optim_state_dict.rank1", {"r": 1}),
        ("lr_state_dict", {"last_epoch": 12}),
    ):
        torch.save(obj, path / f"{name}.pt")
    files = {p.name: {"bytes": p.stat().st_size, "sha256": atomic.sha256(p)} for p in path.iterdir()}
    (path / "manifest.json").write_text(json.dumps({"step": 12, "world_size": 2, "files": files}))
    loaded = checkpoint.load(path, Placement.of(None, 1, 2), batch_size=4)
    assert loaded.kinds["model_state_dict"] == traits.PER_RANK and loaded.optim == {"r": 1}
    assert torch.equal(loaded.model["w"], torch.ones(2)) and loaded.lr == {"last_epoch": 12}
    assert (loaded.state.sample_in_segment, loaded.state.step_samples) == (3 * 4 * 2, 4 * 2)
    with pytest.raises(CheckpointError, match="per rank .* for 2 data-parallel rank"):
        checkpoint.load(path, Placement.of(None, 0, 1), batch_size=4)
