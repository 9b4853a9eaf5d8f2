"""`python -m apps.train [CONFIG ...] [--config FILE ...] [--override key=value ...] [--resume auto|PATH] [--nproc N]`

Trains a reference model with a pycomm training algorithm. With no arguments: the embedded default
(small CNN, embedded MNIST, periodic local SGD on 2 CPU ranks, a few minutes). Started without a
launcher and with launch.nproc > 1 it re-runs itself under `mpirun -n N`; under srun, mpirun or
torchrun each process is one rank."""

from __future__ import annotations

import time

_MAIN_START = time.time()  # before the imports, which the start-up profile (PYCOMM_PROFILE_STARTUP) times

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402

_TORCH_IMPORTED = time.time()

from apps import failure, fault_injection, launch, nonfinite, optim, requirements, run_dir, trace_window  # noqa: E402
from apps.command_name import command_name  # noqa: E402
from apps.config import checks, loading  # noqa: E402
from apps.config.schema import Config  # noqa: E402
from apps.data import iterate  # noqa: E402
from apps.loop_support import step_seed  # noqa: E402
from apps.resume_point import NothingToTrain  # noqa: E402
from apps.run import Run  # noqa: E402
from apps.tasks import Result  # noqa: E402
from apps.trace_window import TraceWindow  # noqa: E402
from pycomm import startup_profile  # noqa: E402


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of ranks, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (ranks to start), got {value}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=command_name("apps.train", "pycomm-train"), description=__doc__.split("\n\n")[1])
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="YAML file(s), like --config (layered first)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML file (default: the embedded default run); repeatable: later files layer over earlier ones",
    )
    p.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config value, e.g. optim.lr=0.1 (repeatable; applied after the files)",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    again = p.add_mutually_exclusive_group()  # what to do with runs/<name>/ of an earlier run
    again.add_argument("--resume", metavar="auto|PATH", help="continue from the newest checkpoint (auto) or PATH")
    again.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier run of the same name (its directory is refused otherwise)",
    )
    p.add_argument("--nproc", type=_positive_int, help="ranks to start on this machine (launch.nproc)")
    p.add_argument(
        "--trace",
        metavar="A:B",
        help="capture steps A to B-1 with torch.profiler and pycomm's trace on "
        "every rank into RUN_DIR/trace (docs/tracing.md)",
    )
    return p.parse_args(argv)


def forward_backward(
    task: Callable[..., Result],
    model: torch.nn.Module,
    opt: Any,
    batch: tuple[torch.Tensor, ...],
    micro_batch: int | None,
    device_type: str,
    amp: torch.dtype | None,
) -> tuple[float, int]:
    """Forward and backward over the step's micro-batches of `micro_batch` samples (data.physical_batch_size;
    None: one), each loss weighted by its share of the batch so the gradients are the whole batch's mean.
    All but the last backward run inside `opt.no_sync()` where the algorithm has it (no communication
    until the gradients are complete). Returns (the batch's mean loss, micro-batches run)."""
    n = batch[0].shape[0]
    chunks = list(zip(*(b.split(micro_batch or n) for b in batch)))
    loss = 0.0
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        with contextlib.nullcontext() if last or not hasattr(opt, "no_sync") else opt.no_sync():
            with torch.autocast(device_type, dtype=amp or torch.float32, enabled=amp is not None):
                result = task(model, chunk)
            share = chunk[0].shape[0] / n
            (result.loss * share).backward()
        loss += result.loss.item() * share
    return loss, len(chunks)


def train(cfg: Config, resume: str | None = None, trace: tuple[int, int] | None = None) -> int:
    try:
        run = Run(cfg, resume)
    except NothingToTrain as e:  # a finished rank of independent processes: its peers may be gone
        print(e, flush=True)
        return 0
    window = TraceWindow(trace, run.dir, run.dist.comm, run.metrics.message) if trace else None
    if cfg.train.eval_on_start and run.state.step == 0:
        run.evaluate(run.state.epoch)
    if optim.owns_loop(cfg.algorithm):  # e.g. Hogwild worker processes: the algorithm's opt.train(...)
        from apps.own_loop import train_own_loop

        return run.finish(train_own_loop(run))
    if optim.serves(cfg.algorithm) and run.opt.is_server:  # a parameter server's server rank
        from apps.server_loop import serve

        return run.finish(serve(run))
    model, opt, state, plan, layout = run.model, run.opt, run.state, run.plan, run.layout
    bare = opt is run.local_opt  # algorithm "none": a plain torch optimizer takes no loss=
    while state.step < run.budget.total_steps:
        model.train()
        for batch in iterate(
            run.splits.train, plan.batches(state.epoch, state.segment, state.sample_in_segment), cfg.data.num_workers
        ):
            if window:
                window.before_step(state.step)
            tic = time.time()
            torch.manual_seed(step_seed(cfg.train.seed, run.dist.rank, state.step))  # dropout, augmentation
            batch = tuple(b.to(run.device, non_blocking=True) for b in batch)
            opt.zero_grad(set_to_none=True)
            if layout.pipe is not None:  # pipeline stages: the schedule runs the micro-batches' forwards and backwards
                loss = layout.pipeline_step(batch, run.kind, run.device.type, run.amp)
            else:
                loss, _ = forward_backward(
                    run.task, model, opt, batch, cfg.data.physical_batch_size, run.device.type, run.amp
                )
            nonfinite.check_loss(loss, state.step + 1, cfg.train.allow_nonfinite)
            if cfg.train.grad_clip:  # by the whole model's norm: sharded gradients and stages included
                layout.clip_grad_norm_(opt, model, cfg.train.grad_clip)
            lr = run.lr_sched.get_last_lr()[0]
            # the replica's own loss for methods that rank replicas by it (lsgd); the logged one is the mean
            opt.step() if bare else opt.step(loss=layout.pipe.replica_loss if layout.pipe is not None else loss)
            run.lr_sched.step()
            epoch, segment = state.epoch, state.segment
            segment_done = state.advance(plan)
            run.log_step(
                epoch, segment, loss, lr, 1, time.time() - tic, batch[0].shape[1] if run.kind == "lm" else None
            )
            if window:
                window.after_step(state.step - 1)
            if run.boundary(epoch):
                return run.finish(preempted=True)
            if segment_done or state.step >= run.budget.total_steps:
                break
    if window:
        window.close()  # the run ended inside the window
    if hasattr(opt, "close"):  # independent processes say goodbye to their server / peers
        opt.close()
    return run.finish(preempted=False)


def main(argv: list[str] | None = None) -> int:
    startup_profile.mark("main_start", at=_MAIN_START)
    startup_profile.mark("torch_imported", at=_TORCH_IMPORTED)
    startup_profile.mark("apps_imported")
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        loaded = loading.resolve(
            args.configs + args.config, args.override + ([f"launch.nproc={args.nproc}"] if args.nproc else [])
        )
        requirements.check(loaded.config)  # optional packages the config needs, before any rank starts
        if args.resume:
            checks.check_resume(loaded.config, args.resume)
        trace = trace_window.parse(args.trace) if args.trace else None
    except (loading.ConfigError, ValueError) as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    cfg = loaded.config
    if launch.SPAWNED not in os.environ and launch.detect().rank == 0:  # once per launch, not per rank
        for note in loaded.notes:
            print(f"note: {note}", file=sys.stderr)
    if args.print_config:
        print(loading.dump(cfg), end="")
        return 0
    try:
        checks.check_data_files(cfg)
    except loading.ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if launch.SPAWNED not in os.environ:  # the ranks a launcher starts were checked by it
        first = launch.detect().rank == 0  # every rank of a job started by mpirun/srun checks; rank 0 says
        try:  # why and removes (--overwrite)
            run_dir.claim(cfg, args.resume, args.overwrite, removes=first)
        except run_dir.RunExists as e:
            if first:
                print(f"error: {e}", file=sys.stderr)
            return failure.EXIT_CONFIG
    startup_profile.mark("config_resolved")
    if launch.should_spawn(cfg.launch.nproc):
        if optim.independent(cfg.algorithm):  # ranks that must survive a peer's death: no MPI job
            return launch.spawn_independent(cfg.launch.nproc, argv, optim.server_ranks(cfg.algorithm))
        return launch.spawn(cfg.launch.nproc, argv, log=run_dir.log_path(cfg))
    launch.export_rendezvous(launch.detect())
    try:
        if not args.resume:  # a resumed process (a restarted server too) does not fail again
            fault_injection.inject(Run)  # PYCOMM_APPS_FAIL_AT, a testing aid; nothing when unset
        return train(cfg, args.resume, trace)
    except (Exception, KeyboardInterrupt) as e:
        return failure.fail(e)  # one line, one traceback; with other ranks it ends the job at once


if __name__ == "__main__":
    sys.exit(main())
