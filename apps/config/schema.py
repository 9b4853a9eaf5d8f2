"""The typed run configuration. Defaults are the embedded default run (no download, 2 CPU ranks,
a few minutes): the small CNN on the embedded MNIST with periodic local SGD.

Options counted in epochs (keys ending in `_epochs`) are converted to optimizer steps once the data
size is known (apps.train), since algorithms count steps.

Numeric fields declare their valid range (`bounded`); apps.config.typed checks it for every value,
list elements included, so a value that would train wrong (a negative clip norm, zero steps) is
refused before any rank starts. None always passes (the field's "not set")."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional


class ConfigError(ValueError):
    """A configuration that cannot run as written; the message names the key and what was expected."""


BOUNDS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def bounded(default: Any, *bounds: tuple[str, float], factory: Any = None) -> Any:
    """A dataclass field whose value (each element, for lists) must satisfy every (op, limit) bound."""
    meta = {"bounds": bounds}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def positive(default: Any) -> Any:
    return bounded(default, (">", 0))


def non_negative(default: Any) -> Any:
    return bounded(default, (">=", 0))


# The largest float32: a learning rate above it overflows inside the optimizer's step (float32 parameters)
FLOAT32_MAX = 3.4028234663852886e38
# torch.manual_seed and torch.Generator take seeds up to 2**64 - 1 (larger ones overflow inside the ranks)
SEED_MAX = 2**64 - 1


def rate(default: Any, low: str = ">") -> Any:
    """A learning rate: > 0 (or >= 0 with low=">=") and representable in float32."""
    return bounded(default, (low, 0), ("<=", FLOAT32_MAX))


@dataclass
class ModelConfig:
    name: str = "cnn"
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the model's constructor


@dataclass
class DataConfig:
    name: str = "mnist"
    path: Optional[str] = None  # None for mnist: the embedded copy
    batch_size: int = positive(32)  # per rank (derived from total_batch_size when that is set)
    total_batch_size: Optional[int] = positive(None)  # global batch over all ranks (QSR's --total-batch-size)
    physical_batch_size: Optional[int] = positive(None)  # samples per backward; smaller: gradient accumulation
    eval_batch_size: int = positive(500)
    segment_size: Optional[int] = positive(None)  # samples per segment (maxie's unit of progress); None: one epoch
    num_workers: int = non_negative(0)
    shuffle: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the dataset's loader


@dataclass
class OptimConfig:
    name: Literal["sgd", "adamw", "lars"] = "sgd"
    lr: float = rate(0.05)
    momentum: float = bounded(0.9, (">=", 0), ("<", 1))
    nesterov: bool = False
    weight_decay: float = non_negative(0.0)
    betas: list[float] = bounded(None, (">=", 0), ("<", 1), factory=lambda: [0.9, 0.999])
    eps: float = positive(1e-8)
    trust_coefficient: float = positive(0.001)  # LARS
    exclude_bias_and_norm: bool = True  # no weight decay (and no LARS adaptation) on biases and norms


@dataclass
class ScheduleConfig:
    name: Literal["constant", "cosine", "multistep"] = "cosine"
    warmup_epochs: float = non_negative(0.0)
    warmup_steps: Optional[int] = non_negative(None)  # overrides warmup_epochs
    baseline_lr: float = rate(0.0, ">=")  # learning rate at the start of the linear warm-up
    min_lr: float = rate(0.0, ">=")  # cosine floor (at most optim.lr: checked with it)
    milestones: list[float] = bounded(None, (">=", 0), factory=list)  # multistep, in epochs
    gamma: float = positive(0.1)  # multistep factor
    # The schedule's horizon: total_steps, else total_epochs, else train.epochs (never train.max_steps,
    # which only stops the run early; set total_steps to the same number to squeeze the schedule).
    total_epochs: Optional[float] = positive(None)  # QSR's --epochs-for-sche
    total_steps: Optional[int] = positive(None)


@dataclass
class AlgorithmConfig:
    name: str = "plsgd"
    options: dict[str, Any] = field(default_factory=lambda: {"averaging_freq": 8})
    # a Python module imported first, which registers `name` with @algorithms.register (your own algorithm)
    module: Optional[str] = None


@dataclass
class ParallelConfig:
    """The parallel layout (a pycomm.Mesh: pp x dp_replicate x dp_shard, multiplying to the ranks; one
    size may be -1, the ranks left) and the pipeline's settings. algorithm.name is the method on it;
    `sharding` (zero1/2/3) puts ZeRO inside dp_shard under algorithm.name across dp_replicate."""

    pp: int = 1  # pipeline stages (the model cut into pp parts)
    dp_replicate: int = 1  # replicas
    dp_shard: int = -1  # shard (ZeRO) ranks; -1: the ranks left
    # algorithms.pipeline.SCHEDULES, written out so that reading a config imports no algorithm
    # (tests/apps/test_parallel.py holds the two equal)
    schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = "1f1b"
    microbatches: int = positive(4)  # per step, of data.batch_size / microbatches samples each
    chunks: int = bounded(2, (">=", 2))  # model chunks per stage (interleaved_1f1b)
    split: Optional[list[int]] = bounded(None, (">", 0))  # first layer of each later stage; None: balanced
    sharding: Optional[str] = None  # zero1 | zero2 | zero3 inside dp_shard, algorithm.name across dp_replicate
    sharding_options: dict[str, Any] = field(default_factory=dict)  # the ZeRO stage's options


@dataclass
class TrainConfig:
    epochs: float = non_negative(3.0)  # 0 with max_steps: run max_steps steps
    max_steps: Optional[int] = positive(None)  # stop earlier (the schedule's horizon stays: see schedule)
    seed: int = bounded(0, (">=", 0), ("<=", SEED_MAX))
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "bfloat16"] = "float32"  # bfloat16: autocast (no loss scaling needed)
    grad_clip: Optional[float] = positive(None)  # max gradient norm; None: no clipping
    log_every: int = positive(10)  # console progress and TensorBoard/W&B points (CSV/JSONL: every step)
    eval_every_epochs: float = positive(1.0)
    eval_on_start: bool = False  # evaluate the initial model too (QSR's --eval-on-start)
    bn_batches: int = non_negative(0)  # >0: re-estimate BatchNorm statistics on this many training micro-batches
    # before each evaluation, averaged over ranks (QSR's --bn-batches)
    preempt_check_every: int = positive(1)  # steps between the ranks' agreement on a pending SIGTERM/SIGUSR1
    peak_flops: Optional[float] = positive(None)  # per device, for MFU (GPT); None: guessed for known GPUs
    allow_nonfinite: bool = False  # train on when the loss or parameters become inf / nan (apps.nonfinite)


@dataclass
class CheckpointConfig:
    directory: Optional[str] = None  # None: <run dir>/checkpoints
    prefix: str = "ckpt"
    every_steps: int = non_negative(0)  # 0: at the end of every epoch
    keep_last: int = non_negative(2)  # periodic checkpoints kept, 0: all (best and preempt are kept apart)
    save_best: bool = True
    # Algorithms that shard their state (ZeRO): sharded = each rank saves its shard (resumable on any number
    # of ranks); full = rank 0 saves the gathered optimizer state. The model file is always the full model.
    state_dict_type: Literal["sharded", "full"] = "sharded"

    def directory_in(self, run_dir: Path) -> Path:
        """Where the checkpoints of the run in `run_dir` go."""
        return Path(self.directory) if self.directory else run_dir / "checkpoints"


@dataclass
class LoggingConfig:
    csv: bool = True
    jsonl: bool = True
    progress: bool = True
    tensorboard: bool = False
    wandb: Literal["disabled", "online", "offline"] = "disabled"
    wandb_project: str = "pycomm"
    wandb_tags: list[str] = field(default_factory=list)
    plot: bool = True  # PNGs in the run directory at the end


@dataclass
class LaunchConfig:
    nproc: int = positive(2)  # ranks started on this machine when no launcher started us
    backend: Literal["auto", "mpi", "nccl", "local"] = "auto"  # pycomm.init(backend=...)


@dataclass
class Config:
    name: str = "mnist-cnn-plsgd"  # the run's directory under out_dir: a plain name, no '/'
    out_dir: str = "runs"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)


def epochs_to_steps(options: dict[str, Any], steps_per_epoch: int) -> dict[str, Any]:
    """`x_epochs: e` -> `x_steps: round(e * steps_per_epoch)`; other options unchanged."""
    out = {}
    for key, value in options.items():
        if key.endswith("_epochs"):
            out[key[: -len("_epochs")] + "_steps"] = int(round(value * steps_per_epoch))
        else:
            out[key] = value
    return out
