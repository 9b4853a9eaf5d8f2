"""`python -m apps.train [--config FILE] [--override key=value ...] [--resume auto|PATH] [--nproc N]`

Trains a reference model with a pycomm training algorithm. With no arguments: the embedded default
(small CNN, embedded MNIST, periodic local SGD on 2 CPU ranks, a few minutes). Started without a
launcher and with launch.nproc > 1 it re-runs itself under `mpirun -n N`; under srun, mpirun or
torchrun each process is one rank."""
from __future__ import annotations

import argparse
import sys
import time

import torch

from apps import config_io, failure, fault_injection, launch
from apps.config import Config
from apps.data import iterate
from apps.run import Run
from apps.runtime import step_seed

LAP = ("lapsgd", "lppsgd")  # train in their own worker processes: apps.train_lap drives them


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m apps.train", description=__doc__.split("\n\n")[1])
    p.add_argument("--config", help="YAML file (default: the embedded default run)")
    p.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="set a config value, e.g. optim.lr=0.1 (repeatable)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--resume", metavar="auto|PATH", help="continue from the newest checkpoint (auto) or PATH")
    p.add_argument("--nproc", type=int, help="ranks to start on this machine (launch.nproc)")
    return p.parse_args(argv)


def train(cfg: Config, resume: str | None = None) -> int:
    run = Run(cfg, resume)
    if cfg.algorithm.name in LAP:
        from apps.train_lap import train_lap
        return run.finish(train_lap(run))
    model, opt, state, plan = run.model, run.opt, run.state, run.plan
    bare = opt is run.local_opt  # algorithm "none": a plain torch optimizer takes no loss=
    while state.step < run.budget.total_steps:
        model.train()
        for batch in iterate(run.splits.train, plan.batches(state.epoch, state.segment, state.step_in_segment),
                             cfg.data.num_workers):
            tic = time.time()
            torch.manual_seed(step_seed(cfg.train.seed, run.dist.rank, state.step))  # dropout, augmentation
            batch = tuple(b.to(run.device, non_blocking=True) for b in batch)
            with torch.autocast(run.device.type, dtype=run.amp or torch.float32, enabled=run.amp is not None):
                result = run.task(model, batch)
            opt.zero_grad(set_to_none=True)
            result.loss.backward()
            if cfg.train.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            lr, loss = run.lr_sched.get_last_lr()[0], result.loss.item()
            opt.step() if bare else opt.step(loss=loss)
            run.lr_sched.step()
            epoch, segment = state.epoch, state.segment
            segment_done = state.advance(plan)
            run.log_step(epoch, segment, loss, lr, 1, time.time() - tic,
                         batch[0].shape[1] if run.kind == "lm" else None)
            if run.boundary(epoch):
                return run.finish(preempted=True)
            if segment_done or state.step >= run.budget.total_steps:
                break
    return run.finish(preempted=False)


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
        fault_injection.inject(Run)  # PYCOMM_APPS_FAIL_AT, a testing aid; nothing when unset
        return train(cfg, args.resume)
    except (Exception, KeyboardInterrupt) as e:
        return failure.fail(e)  # one line, one traceback; with other ranks it ends the job at once


if __name__ == "__main__":
    sys.exit(main())
