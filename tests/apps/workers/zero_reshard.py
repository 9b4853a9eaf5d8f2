"""On every rank of a world of any size: resume a ZeRO run of apps.train from a checkpoint written on
another number of ranks and check that the resumed state, gathered (full_state_dict), equals the
reference: the model and optimizer files of a full-state checkpoint of the same step (the learning rate:
this world's schedule's at the same samples). Each checkpoint is resumed in turn by a new Run in this
process (one launch serves them all: a launch of python and torch per rank is most of the test's time).
argv: out_dir, reference checkpoint (state_dict_type=full), the checkpoints to resume from joined by ",",
then overrides; each resumed run is named after its checkpoint's run directory."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from apps.config import loading
from apps.run import Run


def _equal(a: object, b: object, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, sorted(a), sorted(b) if isinstance(b, dict) else b)
        for k in a:
            _equal(a[k], b[k], f"{where}.{k}")
    elif torch.is_tensor(a):
        assert torch.equal(a, b), f"{where} differs: max |diff| {float((a.float() - b.float()).abs().max())}"
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def check(out: str, resume: Path, reference: Path, overrides: list[str]) -> None:
    cfg = loading.load(None, [f"out_dir={out}", f"name={resume.parent.parent.name}", *overrides])
    run = Run(cfg, str(resume))
    full = run.opt.full_state_dict()
    _equal(full["model"], torch.load(reference / "model_state_dict.pt", weights_only=True), "model")
    saved = torch.load(reference / "optim_state_dict.pt", weights_only=False)
    for mine, theirs in zip(full["optimizer"]["param_groups"], saved["param_groups"]):
        # the learning rate is this world's schedule's at the same samples (its steps differ in size)
        assert mine.pop("lr") == run.lr_sched.get_last_lr()[0], (mine, run.lr_sched.get_last_lr())
        theirs.pop("lr")
    _equal(full["optimizer"], saved, "optimizer")
    assert run.state.step == torch.load(reference / "iter_state_dict.pt")["step"]
    run.finish(preempted=True)
    print(f"rank {run.dist.rank} of {run.dist.size} ok: {resume.parent.parent.name}", flush=True)


def main() -> None:
    out, reference = sys.argv[1], Path(sys.argv[2])
    for resume in sys.argv[3].split(","):
        check(out, Path(resume), reference, sys.argv[4:])


if __name__ == "__main__":
    main()
