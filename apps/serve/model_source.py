"""What apps.serve serves: the GPT of an apps.train run (its config.yaml, its newest checkpoint, the
characters of its text file as the vocabulary), or a randomly initialised GPT of the default config."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from apps import checkpoint, config_io
from apps.config import Config
from apps.data.text import vocabulary
from apps.models import MODELS
from apps.models.gpt import GPT

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "gpt_shakespeare_char.yaml"
# tiny Shakespeare's 65 characters: the vocabulary of a random model when the text file is not there
SHAKESPEARE_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass
class Served:
    model: GPT
    vocab: str              # token i is the character vocab[i]
    source: str             # the checkpoint directory, or "random"
    config: Config
    notes: list[str]        # what the log and GET /config say about where the model came from

    @property
    def random(self) -> bool:
        return self.source == "random"


def find_run_dir(path: Path) -> Path:
    """The run directory (the one holding config.yaml) of a checkpoint or of a file inside one."""
    for p in [path, *path.parents]:
        if (p / "config.yaml").is_file():
            return p
    raise checkpoint.CheckpointError(f"--checkpoint {path}: no config.yaml in it or above it; expected a run "
                                     "directory of apps.train (runs/<name>) or a checkpoint inside one")


def resolve_checkpoint(arg: str) -> tuple[Path, Path]:
    """(run directory, checkpoint directory) for --checkpoint RUN_DIR (its newest complete checkpoint)
    or a checkpoint directory / a file inside one."""
    path = Path(arg)
    if not path.exists():
        raise checkpoint.CheckpointError(f"--checkpoint {arg}: no such file or directory")
    if (path / "config.yaml").is_file():   # a run directory: its newest checkpoint, as --resume auto
        cfg = config_io.load(path / "config.yaml")
        directory = Path(cfg.checkpoint.directory) if cfg.checkpoint.directory else path / "checkpoints"
        found = checkpoint.resolve("auto", directory, cfg.checkpoint.prefix)
        if found is None:
            raise checkpoint.CheckpointError(f"--checkpoint {arg}: the run has no complete checkpoint in {directory} "
                                             "yet (apps.train writes one every checkpoint.every_steps and at the end)")
        return path, found
    found = checkpoint.resolve(arg, path.parent, "")
    assert found is not None
    return find_run_dir(found), found


def _vocab(cfg: Config, strict: bool) -> tuple[str, str | None]:
    path = Path(cfg.data.path) if cfg.data.path else None
    if path is not None and path.is_file():
        return vocabulary(path.read_text(encoding="utf-8")), None
    if strict:
        raise checkpoint.CheckpointError(f"the run's data.path {cfg.data.path!r} is not a file: its characters are "
                                         "the model's vocabulary (point it there with -o data.path=...)")
    return SHAKESPEARE_CHARS, f"vocabulary: tiny Shakespeare's {len(SHAKESPEARE_CHARS)} characters " \
                              f"({cfg.data.path} not found)"


def _build(cfg: Config, vocab: str) -> GPT:
    if cfg.model.name != "gpt":
        raise ValueError(f"apps.serve serves the GPT (model.name=gpt); this run trained model.name={cfg.model.name}")
    info = {"vocab_size": len(vocab), "block_size": cfg.data.options.get("block_size", 256)}
    torch.manual_seed(cfg.train.seed)   # the same random model on every rank
    return MODELS.build("gpt", cfg.model.options, info)


def load(checkpoint_arg: str | None, overrides: Sequence[str] = ()) -> Served:
    """The model to serve, in eval mode (no dropout). `overrides` (key=value) apply to the config."""
    if checkpoint_arg is None:
        cfg = config_io.load(DEFAULT_CONFIG, overrides)
        vocab, note = _vocab(cfg, strict=False)
        model = _build(cfg, vocab)
        notes = ["no --checkpoint: serving a RANDOMLY INITIALISED GPT (its text is noise); train one with "
                 "apps.train and pass --checkpoint runs/<name>"] + ([note] if note else [])
        return Served(model.eval(), vocab, "random", cfg, notes)
    run_dir, ckpt = resolve_checkpoint(checkpoint_arg)
    cfg = config_io.load(run_dir / "config.yaml", overrides)
    vocab, _ = _vocab(cfg, strict=True)
    model = _build(cfg, vocab)
    model.load_state_dict(checkpoint.load_model_state(ckpt))
    return Served(model.eval(), vocab, str(ckpt), cfg, [f"serving {ckpt} (run {run_dir})"])
