"""The typed run configuration. Defaults are the embedded default run (no download, 2 CPU ranks,
a few minutes): the small CNN on the embedded MNIST with periodic local SGD.

Options counted in epochs (keys ending in `_epochs`) are converted to optimizer steps once the data
size is known (apps.train), since algorithms count steps."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional


@dataclass
class ModelConfig:
    name: str = "cnn"
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the model's constructor


@dataclass
class DataConfig:
    name: str = "mnist"
    path: Optional[str] = None         # None for mnist: the embedded copy
    batch_size: int = 32               # per rank
    eval_batch_size: int = 500
    segment_size: Optional[int] = None  # samples per segment (the stub's unit of progress); None: one epoch
    num_workers: int = 0
    shuffle: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the dataset's loader


@dataclass
class OptimConfig:
    name: Literal["sgd", "adamw", "lars"] = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    trust_coefficient: float = 0.001   # LARS
    exclude_bias_and_norm: bool = True  # no weight decay (and no LARS adaptation) on biases and norms


@dataclass
class ScheduleConfig:
    name: Literal["constant", "cosine", "multistep"] = "cosine"
    warmup_epochs: float = 0.0
    warmup_steps: Optional[int] = None     # overrides warmup_epochs
    baseline_lr: float = 0.0               # learning rate at the start of the linear warm-up
    min_lr: float = 0.0                    # cosine floor
    milestones: list[float] = field(default_factory=list)  # multistep, in epochs
    gamma: float = 0.1                     # multistep factor
    total_epochs: Optional[float] = None   # schedule horizon when it differs from train.epochs (QSR's --epochs-for-sche)


@dataclass
class AlgorithmConfig:
    name: str = "plsgd"
    options: dict[str, Any] = field(default_factory=lambda: {"averaging_freq": 8})


@dataclass
class TrainConfig:
    epochs: float = 3.0
    max_steps: Optional[int] = None    # stop earlier (and set the horizon) when given
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "bfloat16"] = "float32"  # bfloat16: autocast (no loss scaling needed)
    grad_clip: Optional[float] = None
    log_every: int = 10                # console progress and TensorBoard/W&B points (CSV/JSONL: every step)
    eval_every_epochs: float = 1.0
    preempt_check_every: int = 1       # steps between the ranks' agreement on a pending SIGTERM/SIGUSR1
    peak_flops: Optional[float] = None  # per device, for MFU (GPT); None: guessed for known GPUs


@dataclass
class CheckpointConfig:
    directory: Optional[str] = None    # None: <run dir>/checkpoints
    prefix: str = "ckpt"
    every_steps: int = 0               # 0: at the end of every epoch
    keep_last: int = 2                 # periodic checkpoints kept (best and preempt are kept apart)
    save_best: bool = True
    state_dict_type: Literal["full"] = "full"


@dataclass
class LoggingConfig:
    csv: bool = True
    jsonl: bool = True
    progress: bool = True
    tensorboard: bool = False
    wandb: Literal["disabled", "online", "offline"] = "disabled"
    wandb_project: str = "pycomm"
    wandb_tags: list[str] = field(default_factory=list)
    plot: bool = True                  # PNGs in the run directory at the end


@dataclass
class LaunchConfig:
    nproc: int = 2                     # ranks started on this machine when no launcher started us
    backend: Literal["auto", "mpi", "nccl", "local"] = "auto"  # pycomm.init(backend=...)


@dataclass
class Config:
    name: str = "mnist-cnn-plsgd"
    out_dir: str = "runs"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)


def epochs_to_steps(options: dict[str, Any], steps_per_epoch: int) -> dict[str, Any]:
    """`x_epochs: e` -> `x_steps: round(e * steps_per_epoch)`; other options unchanged."""
    out = {}
    for key, value in options.items():
        if key.endswith("_epochs"):
            out[key[:-len("_epochs")] + "_steps"] = int(round(value * steps_per_epoch))
        else:
            out[key] = value
    return out
