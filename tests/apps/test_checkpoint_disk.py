"""What the disk does to apps.train's checkpoints, through `python -m apps.train`: checkpoint directories whose
manifests were removed are moved aside by `--resume auto`, which trains on past their steps; a save that
runs out of space (a small tmpfs) ends the run with the checkpoint's exit code, naming the directory, the
step and the last complete checkpoint."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from algorithms.checkpointing import Placement
from apps import checkpoint
from apps.checkpoint import MANIFEST
from apps.failure import EXIT_CHECKPOINT
from tests.apps import runs

ONE_RUN = ["-o", "checkpoint.save_best=false"]  # periodic checkpoints only: their steps are known


def test_resume_auto_moves_checkpoints_without_a_manifest_aside_and_trains_on(tmp_path: Path) -> None:
    argv = runs.args(tmp_path, "run", "mbsgd", 1, "-o", "train.max_steps=40", "-o", "checkpoint.keep_last=0", *ONE_RUN)
    runs.run(argv)
    ckpts = tmp_path / "run" / "checkpoints"
    for step in (30, 40):  # the newest manifests deleted: those saves are incomplete
        (ckpts / f"ckpt.step{step:08d}" / MANIFEST).unlink()
    out = runs.run(argv + ["--resume", "auto"]).stdout
    assert f"resumed from {ckpts / 'ckpt.step00000020'} at step 20" in out, out
    for step in (30, 40):
        name = f"ckpt.step{step:08d}"
        assert re.search(
            rf"{ckpts / name} has no {MANIFEST}: an incomplete save .*; moved it aside to "
            rf"{name}\.incomplete-\d{{8}}T\d{{6}}",
            out,
        ), out
        [aside] = ckpts.glob(f"{name}.incomplete-*")
        assert (aside / "model_state_dict.pt").is_file()  # moved, not deleted
    assert "done: 40 steps" in out, out
    assert [p.name for p in checkpoint.complete(ckpts, "ckpt")] == [f"ckpt.step{s:08d}" for s in (10, 20, 30, 40)]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 64 MiB mounted for the test (root only; skipped where mounting is refused), unmounted at
    the end."""
    point = tmp_path / "tmpfs"
    point.mkdir()
    _mount(point, "size=64m")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], capture_output=True)


def _mount(point: Path, options: str) -> None:
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (it needs root): {proc.stderr.strip()}")


def _bytes_on_disk(directory: Path) -> int:
    """Pages the files under `directory` take on a tmpfs, each inode once."""
    sizes = {(f.stat().st_dev, f.stat().st_ino): f.stat().st_size for f in directory.rglob("*") if f.is_file()}
    return sum(-(-size // 4096) * 4096 for size in sizes.values())


def test_a_save_that_runs_out_of_space_names_the_directory_the_step_and_the_last_complete_checkpoint(
    tmp_path: Path, tmpfs: Path
) -> None:
    argv = runs.args(tmp_path, "run", "mbsgd", 1, "-o", f"checkpoint.directory={tmpfs}", *ONE_RUN)
    runs.run(argv + ["-o", "train.max_steps=10"])
    saved = _bytes_on_disk(tmpfs)
    _mount(tmpfs, f"remount,size={saved + saved // 2}")  # room for step 10's checkpoint and half another
    done = runs.watch(argv + ["-o", "train.max_steps=20", "--resume", "auto"], "failed", timeout=100)
    assert done.returncode == EXIT_CHECKPOINT, done.output
    assert (
        f"no space left on {tmpfs} while writing checkpoint step 20; the last complete checkpoint is step 10 "
        f"({tmpfs / 'ckpt.step00000010'})"
    ) in done.output, done.output
    assert [p.name for p in checkpoint.complete(tmpfs, "ckpt")] == ["ckpt.step00000010"]
    assert checkpoint.load(tmpfs / "ckpt.step00000010", Placement.of(None, 0, 1)).state.step == 10
