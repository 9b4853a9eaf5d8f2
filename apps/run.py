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

from algorithms.schedules import continue_at
from apps import bn_stats, nonfinite, optim, parallel, requirements, resume_point
from apps.budget import Budget
from apps.checkpoint import IterState
from apps.config import loading
from apps.config.schema import Config
from apps.data import DATASETS, ShardPlan, iterate
from apps.dist import Dist
from apps.evaluate import evaluate
from apps.loop_support import Checkpointer, device_for, peak_flops, step_seed, writer_rank
from apps.metrics import Metrics, algorithm_quantities
from apps.models import MODELS
from apps.preemption import PreemptionFlag
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
        # servers take no data; the stages of a pipeline replica take the same
        index, count = parallel.data_position(cfg, dist.rank, dist.size)
        self.plan = ShardPlan(
            len(self.splits.train),
            index,
            count,
            cfg.data.batch_size,
            cfg.train.seed,
            cfg.data.segment_size,
            cfg.data.shuffle,
        )
        self.budget = budget = Budget.from_config(cfg, self.plan.steps_per_epoch)
        if resume and dist.independent:  # its peers may have left already: never connect to wait for them
            self._check_something_to_train(resume)

        torch.manual_seed(cfg.train.seed)  # identical initial model on every rank
        self.model = MODELS.build(cfg.model.name, cfg.model.options, self.splits.info).to(self.device)
        self.kind = MODELS.get(cfg.model.name).meta["task"]
        self.task = TASKS[self.kind]
        startup_profile.mark("model_built")
        self.layout = parallel.Layout.build(cfg, dist.comm, self.model)  # mesh, pipeline stage, what to train
        self.local_opt = optim.build_optimizer(cfg.optim, self.layout.module)
        self.opt = self.layout.wrap(
            self.local_opt,
            cfg.algorithm,
            dist.comm,
            dist.size,
            budget.steps_per_epoch,
            {
                "total_steps": budget.schedule_steps,
                "warmup_steps": budget.warmup_steps,
                # for algorithms that keep state of their own on disk (a parameter server)
                "checkpoint_dir": str(cfg.checkpoint.directory_in(self.dir)),
                "checkpoint_every": budget.checkpoint_every,
                "resume": bool(resume),
            },
        )
        if optim.independent(cfg.algorithm):  # under a plain mpirun too: once the algorithm has exchanged its
            dist.independent = True  # addresses, its ranks (a server among them) share no collective
        self.data_ranks = self.layout.data_parallel or dist.size  # ranks whose batches make the global batch
        startup_profile.mark("algorithm_ready")

        self.state = IterState(world_size=dist.size, step_samples=self.plan.global_batch)
        self.state.enter(self.plan, 0, 0)
        self.ckpt = Checkpointer(cfg.checkpoint, self.dir, dist, self.model, self.opt, layout=self.layout)
        restored = self.ckpt.restore(resume, cfg.data.batch_size) if resume else None
        if restored:
            self._place(restored.state)
        # on the optimizer the loop steps (the wrapper; both share param_groups), else torch's check that
        # optimizer.step() ran first watches one that ZeRO and ssp never step; an own loop steps the local one
        self.lr_sched = self.ckpt.lr_sched = self.budget.scheduler(
            cfg, self.local_opt if optim.owns_loop(cfg.algorithm) else self.opt
        )
        if restored:
            continue_at(self.lr_sched, restored.lr, self.state.step + self.budget.schedule_offset)
        if "vocab" in self.splits.info:  # travels with every checkpoint: apps.serve needs no data.path
            self.state.extra["vocab"] = self.splits.info["vocab"]
        if resume and getattr(self.opt, "is_server", False):  # a restarted parameter server: its own checkpoint
            self.state.step = max(self.state.step, self.opt.pushes_served() // len(self.opt.workers))  # says how far
            self.state.epoch = self.state.step // budget.steps_per_epoch
        if resume and getattr(self.opt, "continue_at", None) is not None:  # a worker: where its servers say
            self.opt.steps = self.opt.continue_at
            resume_point.place(self.state, self.plan, self.opt.continue_at)
            continue_at(self.lr_sched, self.lr_sched.state_dict(), self.opt.continue_at + self.budget.schedule_offset)
        self.resumed_at = self.state.step if resume else None
        budget = self.budget  # as _place left it
        self.metrics = Metrics(
            self.dir,
            cfg.logging,
            dist.rank,
            budget.total_steps,
            cfg.train.log_every,
            loading.to_dict(cfg),
            self.resumed_at,
        )
        self.metrics.message(
            f"{cfg.name}: {cfg.model.name} on {cfg.data.name}, {cfg.algorithm.name} over {dist.size} rank(s)"
            f"{self.layout.describe()} on "
            f"{self.device}, {budget.total_steps} steps ({budget.steps_per_epoch}/epoch) -> {self.dir}; "
            f"{budget.describe()}"
        )
        if dist.rank == 0:
            (self.dir / "config.yaml").write_text(loading.dump(cfg))
        self.preempt = PreemptionFlag()
        self.flops_per_token = self.model.flops_per_token() if hasattr(self.model, "flops_per_token") else None
        self.peak = peak_flops(cfg.train.peak_flops, self.device)
        self.start = time.time() - self.state.extra.get("elapsed", 0.0)
        self._first_step_marked = False
        startup_profile.mark("run_ready")

    def _place(self, state: IterState) -> None:
        """Take over a restored iteration state in this world. The data position is in samples, so it
        holds on any number of ranks; the budget (run length, the schedule's horizon and position) is
        recomputed for this world's steps, keeping it in samples. Loops that count steps, not data
        positions (own loops, servers), continue from the step."""
        cfg, plan, saved_world = self.cfg, self.plan, state.world_size
        self.state, state.world_size = state, self.dist.size
        if optim.owns_loop(cfg.algorithm) or optim.serves(cfg.algorithm):
            return
        state.settle(plan)  # a larger global batch may find no whole step left in the segment
        position = plan.progress(state.epoch, state.segment, state.sample_in_segment)
        self.budget = Budget.from_config(cfg, plan.steps_per_epoch, state.step_samples / plan.global_batch).resumed(
            state.step, position
        )
        if saved_world != self.dist.size and self.dist.rank == 0:
            print(
                f"note: the checkpoint was written on {saved_world} rank(s), this run has {self.dist.size}: it "
                f"continues at sample {state.sample_in_segment} of segment {state.segment} of epoch {state.epoch} "
                f"in steps of {plan.global_batch} samples; {self.budget.describe()}",
                flush=True,
            )

    def _check_something_to_train(self, resume: str) -> None:
        ckpt = self.cfg.checkpoint
        taken = resume_point.steps_taken(resume, ckpt.directory_in(self.dir), ckpt.prefix, self.dist.rank)
        if taken is not None and taken[1] >= self.budget.total_steps:
            raise resume_point.NothingToTrain(
                f"rank {self.dist.rank}: nothing to train: {taken[0]} says it took "
                f"{taken[1]} of the run's {self.budget.total_steps} steps"
            )

    def writes(self) -> bool:
        """Whether this rank writes the run's metrics, evaluations and checkpoints: rank 0 (with other ranks
        collectively, for checkpoints), or among independent processes the one the algorithm names."""
        return self.dist.rank == writer_rank(self.opt, self.dist)

    def elapsed(self) -> float:
        return time.time() - self.start

    def log_step(
        self,
        epoch: int,
        segment: int,
        loss: float,
        lr: float,
        steps: int,
        seconds: float,
        tokens_per_sample: int | None,
    ) -> None:
        samples_per_s = steps * self.cfg.data.batch_size * self.data_ranks / max(seconds, 1e-9)
        tokens_per_s = samples_per_s * tokens_per_sample if tokens_per_sample else None
        mfu = (
            tokens_per_s * self.flops_per_token / (self.peak * self.dist.size)
            if tokens_per_s and self.flops_per_token and self.peak
            else None
        )
        self.metrics.step(
            {
                "step": self.state.step,
                "epoch": epoch,
                "segment": segment,
                "time": self.elapsed(),
                "loss": loss,
                "lr": lr,
                "samples_per_s": samples_per_s,
                "tokens_per_s": tokens_per_s,
                "mfu": mfu,
                **algorithm_quantities(self.opt, self.dist.size, self.layout.pipe),
            }
        )
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
            return None  # independent processes share no collectives: the writer scores its model alone
        if self.layout.pipe is not None:  # every rank scores the whole model: the stages' values to all
            self.layout.share_stages(self.opt, self.model)
        if cfg.train.bn_batches:
            torch.manual_seed(step_seed(cfg.train.seed, self.dist.rank, state.step))  # augmentation, dropout
            micro = cfg.data.physical_batch_size or cfg.data.batch_size
            indices = itertools.islice(
                (i for b in self.plan.batches(state.epoch, 0) for i in b.split(micro)), cfg.train.bn_batches
            )
            batches = (tuple(t.to(self.device) for t in b) for b in iterate(self.splits.train, indices))
            bn_stats.reestimate(self.model, batches, self._forward, self.opt)
        ev = evaluate(
            self.model,
            self.task,
            self.splits.eval,
            Dist() if self.dist.independent else self.dist,
            cfg.data.eval_batch_size,
            self.device,
            self.amp,
            self.kind != "mae",
        )
        self.metrics.eval({"step": state.step, "epoch": epoch, "time": self.elapsed(), **ev})
        return ev

    def _forward(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> Any:
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            return self.task(model, batch)

    def boundary(self, epoch: int) -> bool:
        """After a step: evaluate, checkpoint, and agree on preemption. True: stop now (saved)."""
        cfg, state, budget = self.cfg, self.state, self.budget
        last = state.step >= budget.total_steps
        if (
            (self.splits.eval is not None and state.step % budget.eval_every == 0)
            or state.step % budget.checkpoint_every == 0
            or last
        ):  # nothing diverged is scored or saved
            nonfinite.check_parameters(self.model.named_parameters(), state.step, cfg.train.allow_nonfinite)
        if self.dist.independent and not self.metrics.active and self.writes():  # the writer was lost
            self.metrics.take_over(state.step)
            self.metrics.message(
                f"rank {self.dist.rank} takes over evaluation, metrics and checkpoints at step "
                f"{state.step} (the ranks below it were lost)"
            )
        if self.splits.eval is not None and (state.step % budget.eval_every == 0 or last):
            ev = self.evaluate(epoch)
            if ev is not None and ev["loss"] < state.best_loss:
                state.best_loss = ev["loss"]
                if cfg.checkpoint.save_best:
                    self.ckpt.save(state, "best", self.elapsed())
        if state.step % budget.checkpoint_every == 0 or last:
            self.ckpt.save(state, "periodic", self.elapsed())
        stop = self.preempt.requested
        if hasattr(self.opt, "ask_to_stop"):  # a server's worker: its signal is a request to its servers, and it
            if stop:  # stops when they say (syncps: every worker after the same round)
                self.opt.ask_to_stop()
            stop = self.opt.stop_requested
        # independent processes (a server never comes here) agree through their messages, not a collective
        if state.step % cfg.train.preempt_check_every == 0 and (stop if self.dist.independent else self.dist.any(stop)):
            if hasattr(self.opt, "pause"):  # independent processes: the peers stop waiting; nothing left in flight
                self.opt.pause()
            path = self.ckpt.save(state, "preempt", self.elapsed())
            self.metrics.message(
                f"preempted ({self.stop_cause()}) at step {state.step}: saved {path}; continue with --resume auto"
            )
            return True
        return False

    def stop_cause(self) -> str:
        if self.preempt.requested:
            return f"signal {self.preempt.signal}"
        if hasattr(self.opt, "ask_to_stop"):  # a server's worker
            return "the servers asked the workers to stop"
        return "another rank was preempted"

    def finish(self, preempted: bool) -> int:
        self.metrics.close()
        self.preempt.close()
        if preempted:
            return 0
        if self.resumed_at is not None and self.state.step == self.resumed_at >= self.budget.total_steps:
            self.metrics.message(
                f"already finished: the run resumed at step {self.state.step} of "
                f"{self.budget.total_steps}, so nothing was trained; raise train.epochs or "
                f"train.max_steps to train on, or give a new run another name"
            )
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
            print(
                f"warning: the run finished but its plots were not drawn ({type(e).__name__}: {e}); "
                f"draw them later with `python -m apps.plot {self.dir}`",
                file=sys.stderr,
                flush=True,
            )
            return False
