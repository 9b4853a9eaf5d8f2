"""A checkpoint runs no code. Every file of real checkpoints of apps.train (whatever kinds it writes: the
model's, optimizer's, scheduler's and iteration states, each pipeline stage's own, ZeRO's shards, a
parameter server's state), replaced by a crafted pickle whose `__reduce__` would create a marker file,
the manifest rewritten to match as an attacker would, is refused by the reader a resume uses, naming
the file, and the marker never appears; through `python -m apps.train --resume auto` too, for an
optimizer's shard and a parameter server's file (exit code 3, the checkpoint's)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from algorithms import checkpointing
from algorithms.checkpointing import MANIFEST, CheckpointError, Placement
from algorithms.ps import server_state
from apps import checkpoint
from apps.failure import EXIT_CHECKPOINT
from tests.apps import runs
from tests.checkpoint_payload import REFUSED, plant

PS_OPTIONS = "algorithm.options={worker_timeout: 6, server_timeout: 12}"  # workers give up on a refused server soon
# name -> (algorithm, ranks, options): between them every kind of file apps.train writes
RUNS = {
    "pipeline": ("mbsgd", 2, ["-o", "parallel.pp=2"]),
    "zero": ("zero2", 2, ["-o", "checkpoint.state_dict_type=sharded"]),
    "ps": ("asyncps", 3, ["-o", PS_OPTIONS]),
}
STEPS = 10
_FILE = re.compile(r"^(?P<stem>[\w-]+?)(?:\.pp(?P<pp>\d+))?(?:\.rank(?P<d>\d+))?\.pt$")


def _argv(out: Path, name: str, *extra: str) -> list[str]:
    algorithm, nproc, options = RUNS[name]
    return runs.args(out, name, algorithm, nproc, *options, "-o", "checkpoint.save_best=false", *extra)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The out_dir of the RUNS, STEPS steps each, a checkpoint at the end."""
    out = tmp_path_factory.mktemp("saved")
    for name in RUNS:
        runs.run(_argv(out, name, "-o", f"train.max_steps={STEPS}"), timeout=400)
    return out


def _files(checkpoints: Path) -> list[Path]:
    """Every file a resume may read: those of the newest checkpoint and those beside the checkpoints (a
    parameter server's)."""
    newest = checkpoint.complete(checkpoints, "ckpt")[-1]
    return sorted(p for p in [*newest.iterdir(), *checkpoints.iterdir()] if p.is_file() and p.name != MANIFEST)


def _read_as_a_resume_does(file: Path) -> None:
    """A parameter server's file as the server restores it; a checkpoint's file as the rank that reads it
    (its pipeline stage and data-parallel place, from the file's name) restores the checkpoint."""
    if (file.parent / MANIFEST).is_file():
        ckpt = checkpointing.read_manifest(file.parent)
        m, shape = _FILE.match(file.name), ckpt.layout.shape
        d = int(m["d"] or 0)
        at = Placement(
            dict(shape),
            {"pp": int(m["pp"] or 0), "dp_replicate": d // shape["dp_shard"], "dp_shard": d % shape["dp_shard"]},
        )
        checkpoint.restore(str(file.parent), file.parent.parent, "ckpt", at)
    else:
        server_state.load(file)


@pytest.mark.mpi
@pytest.mark.parametrize("name", RUNS)
def test_every_file_of_a_real_checkpoint_is_refused_when_crafted(saved: Path, tmp_path: Path, name: str) -> None:
    files = _files(saved / name / "checkpoints")
    assert {f.name for f in files} >= {
        "model_state_dict" + ("" if name != "pipeline" else ".pp1") + ".pt",
        "iter_state_dict.pt",
    }, files
    if name == "zero":
        assert "optim_state_dict.rank1.pt" in {f.name for f in files}, files  # the second shard
    marker = tmp_path / "ran"
    for file in files:
        copy = tmp_path / file.name
        shutil.copytree(saved / name / "checkpoints", copy / "checkpoints")
        planted = copy / file.relative_to(saved / name)
        plant(planted, marker)
        with pytest.raises(
            CheckpointError,
            match=rf"{re.escape(str(planted))} {REFUSED} \(a reference to .*exec"
            r".*\): refusing to load it; it may have been tampered with",
        ):
            _read_as_a_resume_does(planted)
        assert not marker.exists(), f"{file.name}: the crafted file's code ran"
    kinds = {_FILE.match(f.name)["stem"] for f in files}
    assert kinds >= {"model_state_dict", "optim_state_dict", "lr_state_dict", "iter_state_dict"}, kinds
    assert name != "pipeline" or "pipeline_state_dict" in kinds, kinds
    assert name != "ps" or "ps-server-0" in kinds, kinds


@pytest.mark.mpi
@pytest.mark.parametrize("name, crafted", [("zero", "ckpt.step00000010/optim_state_dict.pt"), ("ps", "ps-server-0.pt")])
def test_resume_auto_refuses_a_crafted_file_and_runs_none_of_it(
    saved: Path, tmp_path: Path, name: str, crafted: str
) -> None:
    shutil.copytree(saved / name, tmp_path / name)
    marker = tmp_path / "ran"
    planted = tmp_path / name / "checkpoints" / crafted
    plant(planted, marker)
    done = runs.watch(
        _argv(tmp_path, name, "-o", f"train.max_steps={2 * STEPS}", "--resume", "auto"), "failed", timeout=100
    )
    assert not marker.exists(), f"the crafted file's code ran\n{done.output}"
    assert f"{planted} {REFUSED}" in done.output, done.output
    assert done.returncode == EXIT_CHECKPOINT, done.output
    if name == "ps":  # refused once: a restart would read the same file
        assert done.output.count(REFUSED) == 1 and "not restarted" in done.output, done.output
