"""Everything a training loop needs, built from the config (data, model, algorithm, schedule,
checkpoints, metrics), and what happens at a step boundary: evaluation, best/periodic checkpoints,
and the ranks' agreement on a pending preemption signal."""
from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from typing import Any

import torch

from apps import bn_stats, config_io, optim, requirements, resume_point
from apps.budget import Budget
from apps.checkpoint import IterState
from apps.config import Config
from apps.data import DATASETS, ShardPlan, iterate
from apps.dist import Dist
from apps.evaluate import evaluate
from apps.metrics import Metrics, algorithm_quantities
from apps.models import MODELS
from apps.preemption import PreemptionFlag
from apps.runtime import Checkpointer, device_for, peak_flops, per_rank_state, step_seed, writer_rank
from apps.tasks import TASKS
from pycomm import startup_profile


class Run:
    def __init__(self, cfg: Config, resume: str | None):
        self.cfg = cfg
        self.dist = dist = Dist.init(cfg.launch.backend)
        self.device = device_for(cfg.train.device, dist.local_rank)
        self.amp = torch.bfloat16 if cfg.train.dtype == "bfloat16" else None
        self.dir = Path(cfg.out_dir) / cfg.name

        data_options = {**cfg.data.options, **({"path": cfg.data.path} if cfg.data.path is not None else {})}
        self.splits = DATASETS.build(cfg.data.name, data_options)
        startup_profile.mark("data_loaded")
        index, count = optim.data_position(cfg.algorithm, dist.rank, dist.size)   # servers take no data
        self.plan = ShardPlan(len(self.splits.train), index, count, cfg.data.batch_size, cfg.train.seed,
                              cfg.data.segment_size, cfg.data.shuffle)
        self.budget = budget = Budget.from_config(cfg, self.plan.steps_per_epoch)
        if resume and dist.independent:   # its peers may have left already: never connect to wait for them
            self._check_something_to_train(resume)

        torch.manual_seed(cfg.train.seed)  # identical initial model on every rank
        self.model = MODELS.build(cfg.model.name, cfg.model.options, self.splits.info).to(self.device)
        self.kind = MODELS.get(cfg.model.name).meta["task"]
        self.task = TASKS[self.kind]
        startup_profile.mark("model_built")
        self.local_opt = optim.build_optimizer(cfg.optim, self.model)
        self.opt = optim.wrap(self.local_opt, self.model, cfg.algorithm, dist.comm, dist.size,
                              budget.steps_per_epoch,
                              {"total_steps": budget.schedule_steps, "warmup_steps": budget.warmup_steps,
                               # for algorithms that keep state of their own on disk (a parameter server)
                               "checkpoint_dir": str(cfg.checkpoint.directory or self.dir / "checkpoints"),
                               "checkpoint_every": budget.checkpoint_every, "resume": bool(resume)})
        self.lr_sched = budget.scheduler(cfg, self.local_opt)
        startup_profile.mark("algorithm_ready")

        self.state = IterState(world_size=dist.size, per_rank=per_rank_state(cfg.algorithm, cfg.checkpoint.state_dict_type))
        self.state.enter(self.plan, 0, 0)
        self.ckpt = Checkpointer(cfg.checkpoint, self.dir, dist, self.model, self.opt, self.lr_sched)
        if resume and (restored := self.ckpt.restore(resume)):
            self.state = restored   # saved from here on as this run's config says (e.g. another state_dict_type)
            self.state.per_rank = per_rank_state(cfg.algorithm, cfg.checkpoint.state_dict_type)
            if self.ckpt.saved_world_size != dist.size:
                self._rescale_position(self.ckpt.saved_world_size)
        if resume and getattr(self.opt, "is_server", False):   # a restarted parameter server: its own checkpoint
            self.state.step = max(self.state.step, self.opt.pushes_served() // len(self.opt.workers))   # says how far
            self.state.epoch = self.state.step // budget.steps_per_epoch
        if resume and getattr(self.opt, "continue_at", None) is not None:   # a worker: where its servers say
            self.opt.steps = self.opt.continue_at
            resume_point.place(self.state, self.plan, self.opt.continue_at)
            resume_point.schedule_at(self.lr_sched, self.opt.continue_at)
        self.metrics = Metrics(self.dir, cfg.logging, dist.rank, budget.total_steps, cfg.train.log_every,
                               config_io.to_dict(cfg), self.state.step if resume else None)
        self.metrics.message(
            f"{cfg.name}: {cfg.model.name} on {cfg.data.name}, {cfg.algorithm.name} over {dist.size} rank(s) on "
            f"{self.device}, {budget.total_steps} steps ({budget.steps_per_epoch}/epoch) -> {self.dir}; "
            f"{budget.describe()}")
        if dist.rank == 0:
            (self.dir / "config.yaml").write_text(config_io.dump(cfg))
        self.preempt = PreemptionFlag()
        self.flops_per_token = self.model.flops_per_token() if hasattr(self.model, "flops_per_token") else None
        self.peak = peak_flops(cfg.train.peak_flops, self.device)
        self.start = time.time() - self.state.extra.get("elapsed", 0.0)
        self._first_step_marked = False
        startup_profile.mark("run_ready")

    def _rescale_position(self, saved_world_size: int) -> None:
        """The position in the segment is counted in steps of the writing run's world: convert it to this
        one's (samples taken / this step's global batch, rounded down: a few samples may be seen twice),
        moving on when the segment is done. Without it a run resumed on more ranks would find no batch left
        in its segment and never advance."""
        s, batch = self.state, self.cfg.data.batch_size
        s.step_in_segment = s.step_in_segment * batch * saved_world_size // (batch * self.dist.size)
        if s.step_in_segment >= self.plan.steps_in_segment(s.segment):
            if s.segment + 1 < self.plan.num_segments:
                s.enter(self.plan, s.epoch, s.segment + 1)
            else:
                s.enter(self.plan, s.epoch + 1, 0)

    def _check_something_to_train(self, resume: str) -> None:
        ckpt = self.cfg.checkpoint
        taken = resume_point.steps_taken(resume, Path(ckpt.directory) if ckpt.directory else self.dir / "checkpoints",
                                         ckpt.prefix, self.dist.rank)
        if taken is not None and taken[1] >= self.budget.total_steps:
            raise resume_point.NothingToTrain(f"rank {self.dist.rank}: nothing to train: {taken[0]} says it took "
                                              f"{taken[1]} of the run's {self.budget.total_steps} steps")

    def writes(self) -> bool:
        """Whether this rank writes the run's metrics, evaluations and checkpoints: rank 0 (with other ranks
        collectively, for checkpoints), or among independent processes the one the algorithm names."""
        return self.dist.rank == writer_rank(self.opt, self.dist)

    def elapsed(self) -> float:
        return time.time() - self.start

    def log_step(self, epoch: int, segment: int, loss: float, lr: float, steps: int, seconds: float,
                 tokens_per_sample: int | None) -> None:
        samples_per_s = steps * self.cfg.data.batch_size * self.dist.size / max(seconds, 1e-9)
        tokens_per_s = samples_per_s * tokens_per_sample if tokens_per_sample else None
        mfu = (tokens_per_s * self.flops_per_token / (self.peak * self.dist.size)
               if tokens_per_s and self.flops_per_token and self.peak else None)
        self.metrics.step({"step": self.state.step, "epoch": epoch, "segment": segment, "time": self.elapsed(),
                           "loss": loss, "lr": lr, "samples_per_s": samples_per_s, "tokens_per_s": tokens_per_s,
                           "mfu": mfu, **algorithm_quantities(self.opt)})
        if not self._first_step_marked:
            self._first_step_marked = True
            startup_profile.mark("first_step")
        self.after_step()

    def after_step(self) -> None:
        """Called once per logged step by every loop (a server: per round of pushes); PYCOMM_APPS_FAIL_AT
        (apps.fault_injection) fails a rank here."""

    def evaluate(self, epoch: int) -> dict | None:
        """Score the model on the eval split and log it (None without one); with train.bn_batches,
        BatchNorm statistics are re-estimated on that many training micro-batches first."""
        cfg, state = self.cfg, self.state
        if self.splits.eval is None or (self.dist.independent and not self.writes()):
            return None   # independent processes share no collectives: the writer scores its model alone
        if cfg.train.bn_batches:
            torch.manual_seed(step_seed(cfg.train.seed, self.dist.rank, state.step))  # augmentation, dropout
            micro = cfg.data.physical_batch_size or cfg.data.batch_size
            indices = itertools.islice((i for b in self.plan.batches(state.epoch, 0) for i in b.split(micro)),
                                       cfg.train.bn_batches)
            batches = (tuple(t.to(self.device) for t in b) for b in iterate(self.splits.train, indices))
            bn_stats.reestimate(self.model, batches, self._forward, self.opt)
        ev = evaluate(self.model, self.task, self.splits.eval, Dist() if self.dist.independent else self.dist,
                      cfg.data.eval_batch_size, self.device,
                      self.amp, self.kind != "mae")
        self.metrics.eval({"step": state.step, "epoch": epoch, "time": self.elapsed(), **ev})
        return ev

    def _forward(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> Any:
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            return self.task(model, batch)

    def boundary(self, epoch: int) -> bool:
        """After a step: evaluate, checkpoint, and agree on preemption. True: stop now (saved)."""
        cfg, state, budget = self.cfg, self.state, self.budget
        last = state.step >= budget.total_steps
        if self.dist.independent and not self.metrics.active and self.writes():   # the writer was lost
            self.metrics.take_over(state.step)
            self.metrics.message(f"rank {self.dist.rank} takes over evaluation, metrics and checkpoints at step "
                                 f"{state.step} (the ranks below it were lost)")
        if self.splits.eval is not None and (state.step % budget.eval_every == 0 or last):
            ev = self.evaluate(epoch)
            if ev is not None and ev["loss"] < state.best_loss:
                state.best_loss = ev["loss"]
                if cfg.checkpoint.save_best:
                    self.ckpt.save(state, "best", self.elapsed())
        if state.step % budget.checkpoint_every == 0 or last:
            self.ckpt.save(state, "periodic", self.elapsed())
        stop = self.preempt.requested
        if hasattr(self.opt, "ask_to_stop"):   # a server's worker: its signal is a request to its servers, and it
            if stop:                           # stops when they say (syncps: every worker after the same round)
                self.opt.ask_to_stop()
            stop = self.opt.stop_requested
        if state.step % cfg.train.preempt_check_every == 0 and self.dist.any(stop):
            if hasattr(self.opt, "pause"):   # independent processes: the peers stop waiting; nothing left in flight
                self.opt.pause()
            path = self.ckpt.save(state, "preempt", self.elapsed())
            self.metrics.message(f"preempted ({self.stop_cause()}) at step {state.step}: saved {path}; "
                                 "continue with --resume auto")
            return True
        return False

    def stop_cause(self) -> str:
        return f"signal {self.preempt.signal}" if self.preempt.requested else "the server was preempted"

    def finish(self, preempted: bool) -> int:
        self.metrics.close()
        self.preempt.close()
        if preempted:
            return 0
        plotted = self.writes() and self.cfg.logging.plot and self._plot()
        outputs = "metrics, checkpoints and plots" if plotted else "metrics and checkpoints"
        self.metrics.message(f"done: {self.state.step} steps in {self.elapsed():.1f}s; {outputs} in {self.dir}")
        return 0

    def _plot(self) -> bool:
        """The run's PNGs. Plots are a by-product: a failure here (matplotlib missing, a font cache, a
        full disk) is a warning and never the exit code of a run that trained. True when drawn."""
        try:
            requirements.require("logging.plot", True)
            from apps.plot import plot_runs
            plot_runs([self.dir], self.dir)
            return True
        except Exception as e:  # noqa: BLE001  (any failure: the training result stands)
            print(f"warning: the run finished but its plots were not drawn ({type(e).__name__}: {e}); "
                  f"draw them later with `python -m apps.plot {self.dir}`", file=sys.stderr, flush=True)
            return False
