"""What apps.serve serves: the GPT of an apps.train run (its config.yaml, its newest checkpoint and
the vocabulary stored in that checkpoint), or a randomly initialised GPT of the default config.

The vocabulary travels with the checkpoint (apps.train keeps the characters of its text file in
every checkpoint's iter_state_dict.pt, `extra["vocab"]`), so a run is served from any directory: the
run's data.path, often relative to where training ran, is read only for a checkpoint written before
that (and then must be a file from here, or be given with -o data.path=...)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from apps import checkpoint
from apps.config import loading
from apps.config.schema import Config
from apps.data.text import source, vocabulary
from apps.models import MODELS
from apps.models.gpt import GPT

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "gpt_shakespeare_char.yaml"


@dataclass
class Served:
    model: GPT
    vocab: str  # token i is the character vocab[i]
    source: str  # the checkpoint directory, or "random"
    config: Config
    notes: list[str]  # what the log says about where the model came from
    public_source: str  # GET /config's: the run's name and the checkpoint's, no absolute path
    public_notes: list[str]  # GET /config's notes: file names, no absolute path

    @property
    def random(self) -> bool:
        return self.source == "random"


def find_run_dir(path: Path) -> Path:
    """The run directory (the one holding config.yaml) of a checkpoint or of a file inside one."""
    for p in [path, *path.parents]:
        if (p / "config.yaml").is_file():
            return p
    raise checkpoint.CheckpointError(
        f"--checkpoint {path}: no config.yaml in it or above it; expected a run "
        "directory of apps.train (runs/<name>) or a checkpoint inside one"
    )


def resolve_checkpoint(arg: str) -> tuple[Path, Path]:
    """(run directory, checkpoint directory) for --checkpoint RUN_DIR (its newest complete checkpoint)
    or a checkpoint directory / a file inside one."""
    path = Path(arg)
    if not path.exists():
        raise checkpoint.CheckpointError(f"--checkpoint {arg}: no such file or directory")
    if (path / "config.yaml").is_file():  # a run directory: its newest checkpoint, as --resume auto
        cfg = loading.load(path / "config.yaml")
        directory = path / "checkpoints"
        if cfg.checkpoint.directory and Path(cfg.checkpoint.directory).is_dir():  # may be relative to elsewhere
            directory = Path(cfg.checkpoint.directory)
        found = checkpoint.resolve("auto", directory, cfg.checkpoint.prefix)
        if found is None:
            raise checkpoint.CheckpointError(
                f"--checkpoint {arg}: the run has no complete checkpoint in {directory} "
                "yet (apps.train writes one every checkpoint.every_steps and at the end)"
            )
        return path, found
    found = checkpoint.resolve(arg, path.parent, "")
    assert found is not None
    return find_run_dir(found), found


def _vocab_of_text(cfg: Config) -> str | None:
    path = source(cfg.data.path)  # unset: the embedded tiny Shakespeare, as apps.train read it
    return vocabulary(path.read_text(encoding="utf-8")) if path.is_file() else None


def checkpoint_vocab(ckpt: Path) -> str | None:
    """The vocabulary apps.train stored in checkpoint `ckpt`; None for a checkpoint written before it did."""
    vocab = checkpoint.iteration_state(ckpt).extra.get("vocab")
    return vocab if isinstance(vocab, str) and vocab else None


def _build(cfg: Config, vocab: str) -> GPT:
    if cfg.model.name != "gpt":
        raise ValueError(f"apps.serve serves the GPT (model.name=gpt); this run trained model.name={cfg.model.name}")
    info = {"vocab_size": len(vocab), "block_size": cfg.data.options.get("block_size", 256)}
    torch.manual_seed(cfg.train.seed)  # the same random model on every rank
    return MODELS.build("gpt", cfg.model.options, info)


def load(checkpoint_arg: str | None, overrides: Sequence[str] = (), dtype: torch.dtype = torch.float32) -> Served:
    """The model to serve, in eval mode (no dropout), in `dtype`. `overrides` (key=value) apply to the config."""
    if checkpoint_arg is None:
        cfg = loading.load(DEFAULT_CONFIG, overrides)
        vocab = _vocab_of_text(cfg)
        notes = [
            "no --checkpoint: serving a RANDOMLY INITIALISED GPT (its text is noise); train one with "
            "apps.train and pass --checkpoint runs/<name>"
        ]
        public = list(notes)
        if vocab is None:
            raise FileNotFoundError(
                f"data.path={cfg.data.path!r} is not a file: its characters are the random "
                "model's vocabulary (leave data.path unset for the embedded tiny Shakespeare)"
            )
        model = _build(cfg, vocab)
        return Served(model.to(dtype).eval(), vocab, "random", cfg, notes, "random", public)
    run_dir, ckpt = resolve_checkpoint(checkpoint_arg)
    cfg = loading.load(run_dir / "config.yaml", overrides)
    vocab = checkpoint_vocab(ckpt) or _vocab_of_text(cfg)
    if vocab is None:
        raise checkpoint.CheckpointError(
            f"checkpoint {ckpt} holds no vocabulary (written before apps.train stored it) and the run's data.path "
            f"{cfg.data.path!r} is not a file from {Path.cwd()}: serve from the directory training ran in, or "
            "give the text file with -o data.path=PATH (its characters are the model's vocabulary)"
        )
    state = checkpoint.load_model_state(ckpt)
    rows = state.get("tok.weight", torch.empty(len(vocab))).shape[0]
    if rows != len(vocab):
        raise checkpoint.CheckpointError(
            f"checkpoint {ckpt}: the model has {rows} token embeddings but the vocabulary "
            f"has {len(vocab)} characters; give the run's own text with -o data.path=PATH"
        )
    model = _build(cfg, vocab)
    model.load_state_dict(state)
    label = f"{run_dir.resolve().name}/{ckpt.name}"
    return Served(
        model.to(dtype).eval(),
        vocab,
        str(ckpt),
        cfg,
        [f"serving {ckpt} (run {run_dir})"],
        label,
        [f"serving checkpoint {ckpt.name} of run {run_dir.resolve().name}"],
    )
