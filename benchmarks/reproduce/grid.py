"""What the reproduction runs, as data: the two tasks (with their budgets), the methods (with the papers'
options), the codecs each method takes, and the `apps.train` overrides of one run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RANKS = 4
# --quick on 2 ranks: it is the test's smoke run, on a 2-core CI machine where each rank's start-up (python,
# torch) dominates a run of a few steps; the quick budgets' evaluation cadences are in epochs of 2 ranks
QUICK_RANKS = 2
SEEDS = (0, 1, 2)
CODECS = (None, "int8")


@dataclass(frozen=True)
class Budget:
    """Optimizer steps of every run of a task (equal for every method) and the evaluation cadence."""

    steps: int
    eval_every_epochs: float


@dataclass(frozen=True)
class Task:
    key: str  # "mnist", "gpt"
    title: str
    metric: str  # eval column compared: "accuracy" (higher is better) or "loss" (lower)
    target: float  # time to target: the first evaluation reaching it
    lr: float  # peak learning rate (QSR's alpha is given relative to it)
    base: tuple[str, ...]  # config files, relative to the repository
    overrides: tuple[str, ...]  # on top of them, for every run of the task
    full: Budget
    quick: Budget
    quick_overrides: tuple[str, ...] = ()  # a smaller model for --quick
    note: str = ""  # what limits the comparison (printed under the task's table)

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "accuracy"

    def better(self, a: float, b: float) -> bool:
        """a at least as good as b (a tie within rounding counts: interpolation may not return b exactly)."""
        if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            return True
        return a >= b if self.higher_is_better else a <= b


@dataclass(frozen=True)
class Method:
    key: str  # run-name part: "plsgd-h4"
    label: str  # legend / table
    algorithm: str  # algorithm.name
    options: dict[str, Any] = field(default_factory=dict)
    codecs: tuple[str | None, ...] = CODECS  # lsgd: no codec (it all-reduces nothing; pycomm raises)
    alpha_over_lr: float | None = None  # qsr: alpha = this x the task's peak lr (H = (alpha / lr)^2)
    tasks: tuple[str, ...] = ("mnist", "gpt")  # lapsgd: mnist only (its workers apply SGD; the GPT trains with AdamW)

    def algorithm_options(self, task: Task) -> dict[str, Any]:
        if self.alpha_over_lr is None:
            return dict(self.options)
        return {**self.options, "alpha": round(self.alpha_over_lr * task.lr, 6)}


def _easgd_like(name: str, **extra: Any) -> dict[str, Any]:
    """SDTL's recipe (apps/configs/sdtl_*): a round every 4 steps, both pulls 0.1."""
    return {"comm_period": 4, "dist_pulling_strength": 0.1, "local_pulling_strength": 0.1, **extra}


METHODS: tuple[Method, ...] = (
    Method("mbsgd", "mbsgd", "mbsgd"),
    *(Method(f"plsgd-h{h}", f"plsgd H={h}", "plsgd", {"averaging_freq": h}) for h in (2, 4, 8, 16)),
    # QSR (Gu et al.): H = max(h_min, floor((alpha / lr)^2)), h_base = h_min = 2. alpha = sqrt(2) lr_peak
    # starts at H = 2 and grows as the cosine decays; alpha = 2 lr_peak starts at H = 4.
    Method("qsr-a1.41", "qsr α=1.41·lr₀", "qsr", {"h_base": 2, "gamma": 2.0}, alpha_over_lr=1.41),
    Method("qsr-a2", "qsr α=2·lr₀", "qsr", {"h_base": 2, "gamma": 2.0}, alpha_over_lr=2.0),
    Method("easgd", "easgd", "easgd", _easgd_like("easgd")),
    Method("lsgd", "lsgd", "lsgd", _easgd_like("lsgd", leader_metric="loss", leader_window=10), codecs=(None,)),
    # LAP-SGD: 2 Hogwild workers per rank, layer-wise averaging every 8 node minibatches
    Method("lapsgd", "lapsgd", "lapsgd", {"num_processes": 2, "averaging_freq": 8}, tasks=("mnist",)),
)

QUICK_METHODS = ("mbsgd", "plsgd-h2", "plsgd-h16", "qsr-a1.41", "easgd", "lsgd", "lapsgd")
QUICK_CODEC_METHODS = ("plsgd-h2",)  # --quick: int8 only here (enough to see int8 < fp32 in bytes)

_NO_OUTPUT = (
    "logging.plot=false",
    "logging.progress=false",
    "logging.jsonl=false",
    "checkpoint.save_best=false",
    "checkpoint.keep_last=1",
)

TASKS: tuple[Task, ...] = (
    Task(
        "mnist",
        "small CNN on MNIST (8,000 / 2,000 t10k split)",
        "accuracy",
        0.95,
        0.05,
        base=(),
        overrides=(
            "data.batch_size=32",
            "optim.name=sgd",
            "optim.lr=0.05",
            "optim.momentum=0.9",
            "schedule.name=cosine",
            "schedule.warmup_steps=0",
        ),
        full=Budget(steps=128, eval_every_epochs=16 / 62),
        quick=Budget(steps=32, eval_every_epochs=16 / 125),
        note="The eval split has 2,000 images: one image is 0.05 points, and the sampling error of an accuracy "
        "near 96% is about ±0.44 points (sqrt(p(1-p)/2000)); smaller differences say nothing.",
    ),
    Task(
        "gpt",
        "char GPT on tiny Shakespeare (2 layers, 64 wide, context 64)",
        "loss",
        2.7,
        2e-3,
        base=("apps/configs/gpt_shakespeare_char.yaml",),
        overrides=(
            "model.options.n_layer=2",
            "model.options.n_head=2",
            "model.options.n_embd=64",
            "model.options.dropout=0.0",
            "data.batch_size=16",
            "data.eval_batch_size=256",
            "data.options.block_size=64",
            "optim.lr=0.002",
            "schedule.warmup_steps=10",
            "schedule.min_lr=0.0002",
        ),
        full=Budget(steps=96, eval_every_epochs=16 / 245),
        quick=Budget(steps=16, eval_every_epochs=8 / 980),
        quick_overrides=("model.options.n_layer=1", "model.options.n_embd=32", "data.options.block_size=32"),
        note="Eval loss over the held-out last 10% of the text (about 111,000 characters); 96 steps see less than "
        "half an epoch, so every method is still far from converged.",
    ),
)


@dataclass(frozen=True)
class Variant:
    """One point of the grid: a method with or without a codec on a task (seeds are repeats of it)."""

    task: Task
    method: Method
    codec: str | None

    @property
    def key(self) -> str:
        return f"{self.task.key}-{self.method.key}-{self.codec or 'fp32'}"

    @property
    def label(self) -> str:
        return f"{self.method.label} + {self.codec}" if self.codec else self.method.label


def ranks(quick: bool) -> int:
    return QUICK_RANKS if quick else RANKS


def variants(quick: bool, tasks: tuple[str, ...] | None = None) -> list[Variant]:
    """The grid, in run order (every method of a task, fp32 then int8)."""
    out = []
    for task in TASKS:
        if tasks and task.key not in tasks:
            continue
        for method in METHODS:
            if task.key not in method.tasks or (quick and method.key not in QUICK_METHODS):
                continue
            for codec in method.codecs:
                if quick and codec and method.key not in QUICK_CODEC_METHODS:
                    continue
                out.append(Variant(task, method, codec))
    return out


def overrides(variant: Variant, seed: int, quick: bool, runs_dir: Path, data_dir: Path | None) -> list[str]:
    """The `-o` values of one run: task, budget, method, codec, seed, where it writes; the GPT reads
    data_dir/tinyshakespeare/input.txt, or without a data_dir the tiny Shakespeare apps.train embeds."""
    task, budget = variant.task, variant.task.quick if quick else variant.task.full
    out = list(task.overrides) + list(task.quick_overrides if quick else ())
    if task.key == "gpt" and data_dir is not None:
        out.append(f"data.path={data_dir / 'tinyshakespeare' / 'input.txt'}")
    out += [
        "train.epochs=100",
        f"train.max_steps={budget.steps}",
        f"schedule.total_steps={budget.steps}",
        f"train.eval_every_epochs={budget.eval_every_epochs!r}",
        f"checkpoint.every_steps={budget.steps}",
        # lapsgd's own loop averages at every chunk end, and chunks end every log_every steps:
        # log at the evaluations only, so it averages where the rule says (and at evaluations)
        f"train.log_every={budget.steps}",
        f"train.seed={seed}",
        f"launch.nproc={ranks(quick)}",
        f"out_dir={runs_dir}",
        f"name={variant.key}-s{seed}",
        *_NO_OUTPUT,
        f"algorithm.name={variant.method.algorithm}",
    ]
    opts = variant.method.algorithm_options(task) | ({"codec": variant.codec} if variant.codec else {})
    out += [f"algorithm.options.{k}={v}" for k, v in opts.items()]
    return out
