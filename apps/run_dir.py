"""A new run does not silently replace an earlier one: `out_dir/name` (and the checkpoints it writes, when
checkpoint.directory puts them elsewhere) holding an earlier run's files is refused before any rank starts,
unless the command continues it (`--resume`) or asks to replace it (`--overwrite`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from apps.config.schema import Config

LOG = "mpirun.log"  # the --nproc launcher appends all that mpirun printed on stderr to it (apps.launch.spawn)


def log_path(cfg: Config) -> Path:
    return Path(cfg.out_dir) / cfg.name / LOG


class RunExists(Exception):
    """The run's directory holds an earlier run's files and neither --resume nor --overwrite was given."""


def earlier_files(cfg: Config) -> list[Path]:
    """What an earlier run of this name left: its config.yaml (every run writes it as it starts) and its
    checkpoints (named with checkpoint.prefix, in checkpoint.directory or out_dir/name/checkpoints). Other
    files (a log a wrapper writes there, say) are no run."""
    run_dir = Path(cfg.out_dir) / cfg.name
    ckpt_dir = cfg.checkpoint.directory_in(run_dir)
    found = [run_dir / "config.yaml"] if (run_dir / "config.yaml").is_file() else []
    if ckpt_dir.is_dir():
        found += sorted(p for p in ckpt_dir.iterdir() if p.name.startswith(cfg.checkpoint.prefix))
    return found


def claim(cfg: Config, resume: str | None, overwrite: bool, removes: bool = True) -> None:
    """Refuse (RunExists) to start a new run over an earlier one's files; with `overwrite`, remove them
    first when `removes` (one process of the launch does: the others only skip the check)."""
    if resume:
        return
    earlier = earlier_files(cfg)
    if not earlier:
        return
    run_dir = Path(cfg.out_dir) / cfg.name
    if not overwrite:
        shown = [str(p.relative_to(run_dir)) if p.is_relative_to(run_dir) else str(p) for p in earlier]
        raise RunExists(
            f"{run_dir} already holds a run named {cfg.name!r} ({', '.join(shown[:3])}"
            f"{', ...' if len(shown) > 3 else ''}): add --resume auto to continue it, -o name=NEW to "
            "start another beside it, or --overwrite to replace it"
        )
    if removes:  # the whole run directory (metrics, plots, traces) and its checkpoints wherever they are
        for path in [run_dir, *earlier]:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
