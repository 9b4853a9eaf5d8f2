"""`python -m apps.train [--config FILE] [--override key=value ...] [--resume auto|PATH] [--nproc N]`

Trains a reference model with a pycomm training algorithm. With no arguments: the embedded default
(small CNN, embedded MNIST, periodic local SGD on 2 CPU ranks, a few minutes). Started without a
launcher and with launch.nproc > 1 it re-runs itself under `mpirun -n N`; under srun, mpirun or
torchrun each process is one rank."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from apps import checkpoint, config_io, launch, optim
from apps.budget import Budget
from apps.checkpoint import IterState
from apps.config import Config
from apps.data import DATASETS, ShardPlan, iterate
from apps.dist import Dist
from apps.evaluate import evaluate
from apps.metrics import Metrics, algorithm_quantities
from apps.models import MODELS
from apps.preemption import PreemptionFlag
from apps.runtime import Checkpointer, device_for, peak_flops, step_seed
from apps.tasks import TASKS


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m apps.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="YAML file (default: the embedded default run)")
    p.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="set a config value, e.g. optim.lr=0.1 (repeatable)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--resume", metavar="auto|PATH", help="continue from the newest checkpoint (auto) or PATH")
    p.add_argument("--nproc", type=int, help="ranks to start on this machine (launch.nproc)")
    return p.parse_args(argv)


def train(cfg: Config, resume: str | None = None) -> int:
    dist = Dist.init(cfg.launch.backend)
    device = device_for(cfg.train.device, dist.local_rank)
    amp = torch.bfloat16 if cfg.train.dtype == "bfloat16" else None
    run_dir = Path(cfg.out_dir) / cfg.name

    data_options = {**cfg.data.options, **({"path": cfg.data.path} if cfg.data.path is not None else {})}
    splits = DATASETS.build(cfg.data.name, data_options)
    plan = ShardPlan(len(splits.train), dist.rank, dist.size, cfg.data.batch_size, cfg.train.seed,
                     cfg.data.segment_size, cfg.data.shuffle)
    budget = Budget.from_config(cfg, plan.steps_per_epoch)

    torch.manual_seed(cfg.train.seed)  # identical initial model on every rank
    model = MODELS.build(cfg.model.name, cfg.model.options, splits.info).to(device)
    kind = MODELS.get(cfg.model.name).meta["task"]
    task = TASKS[kind]
    local_opt = optim.build_optimizer(cfg.optim, model)
    opt = optim.wrap(local_opt, cfg.algorithm, dist.comm, dist.size, budget.steps_per_epoch,
                     {"total_steps": budget.schedule_steps, "warmup_steps": budget.warmup_steps})
    lr_sched = budget.schedule(cfg).scheduler(local_opt)

    state = IterState(world_size=dist.size, per_rank=cfg.algorithm.name not in optim.REPLICATED)
    state.enter(plan, 0, 0)
    ckpt = Checkpointer(cfg.checkpoint, run_dir, dist, model, opt, lr_sched)
    if resume and (restored := ckpt.restore(resume)):
        state = restored
    metrics = Metrics(run_dir, cfg.logging, dist.rank, budget.total_steps, cfg.train.log_every,
                      config_io.to_dict(cfg), state.step if resume else None)
    metrics.message(f"{cfg.name}: {cfg.model.name} on {cfg.data.name}, {cfg.algorithm.name} over {dist.size} "
                    f"rank(s) on {device}, {budget.total_steps} steps ({budget.steps_per_epoch}/epoch) -> {run_dir}")
    if dist.rank == 0:
        (run_dir / "config.yaml").write_text(config_io.dump(cfg))
    preempt = PreemptionFlag()
    flops_per_token = model.flops_per_token() if hasattr(model, "flops_per_token") else None
    peak = peak_flops(cfg.train.peak_flops, device)
    bare = opt is local_opt  # algorithm "none": a plain torch optimizer takes no loss=
    start = time.time() - state.extra.get("elapsed", 0.0)

    while state.step < budget.total_steps:
        model.train()
        batches = plan.batches(state.epoch, state.segment, skip=state.step_in_segment)
        for batch in iterate(splits.train, batches, cfg.data.num_workers):
            tic = time.time()
            torch.manual_seed(step_seed(cfg.train.seed, dist.rank, state.step))  # dropout/augmentation replayable
            batch = tuple(b.to(device, non_blocking=True) for b in batch)
            with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
                result = task(model, batch)
            opt.zero_grad(set_to_none=True)
            result.loss.backward()
            if cfg.train.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            lr = lr_sched.get_last_lr()[0]
            loss = result.loss.item()
            opt.step() if bare else opt.step(loss=loss)
            lr_sched.step()
            epoch, segment = state.epoch, state.segment
            segment_done = state.advance(plan)

            dt = time.time() - tic
            samples_per_s = cfg.data.batch_size * dist.size / dt
            tokens_per_s = samples_per_s * batch[0].shape[1] if kind == "lm" else None
            metrics.step({"step": state.step, "epoch": epoch, "segment": segment, "time": time.time() - start,
                          "loss": loss, "lr": lr, "samples_per_s": samples_per_s, "tokens_per_s": tokens_per_s,
                          "mfu": tokens_per_s * flops_per_token / (peak * dist.size)
                          if tokens_per_s and flops_per_token and peak else None,
                          **algorithm_quantities(opt)})

            last = state.step >= budget.total_steps
            if splits.eval is not None and (state.step % budget.eval_every == 0 or last):
                ev = evaluate(model, task, splits.eval, dist, cfg.data.eval_batch_size, device, amp, kind != "mae")
                metrics.eval({"step": state.step, "epoch": epoch, "time": time.time() - start, **ev})
                if ev["loss"] < state.best_loss:
                    state.best_loss = ev["loss"]
                    if cfg.checkpoint.save_best:
                        ckpt.save(state, "best", time.time() - start)
            if state.step % budget.checkpoint_every == 0 or last:
                ckpt.save(state, "periodic", time.time() - start)
            if state.step % cfg.train.preempt_check_every == 0 and dist.any(preempt.requested):
                path = ckpt.save(state, "preempt", time.time() - start)
                metrics.message(f"preempted (signal {preempt.signal}) at step {state.step}: saved {path}; "
                                f"continue with --resume auto")
                metrics.close()
                return 0
            if segment_done or last:
                break

    metrics.close()
    if dist.rank == 0 and cfg.logging.plot:
        from apps.plot import plot_runs
        plot_runs([run_dir], run_dir)
    metrics.message(f"done: {state.step} steps in {time.time() - start:.1f}s; metrics, checkpoints and plots "
                    f"in {run_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        cfg = config_io.load(args.config, args.override + ([f"launch.nproc={args.nproc}"] if args.nproc else []))
    except (config_io.ConfigError, ValueError) as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(config_io.dump(cfg), end="")
        return 0
    if launch.should_spawn(cfg.launch.nproc):
        return launch.spawn(cfg.launch.nproc, argv)
    launch.export_rendezvous(launch.detect())
    try:
        return train(cfg, args.resume)
    except checkpoint.CheckpointError as e:
        print(f"checkpoint error: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
