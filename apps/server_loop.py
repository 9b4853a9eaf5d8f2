"""The server ranks of algorithms whose ranks take server or worker roles (traits.SERVER): run
`opt.serve()` until every worker has finished or been lost, logging as it goes. The server holds the
model, so it writes the training rows (one per round of `workers` pushes: the workers' mean loss, the
staleness seen, bytes pushed and pulled, the queue depth), evaluates every eval_every rounds and at the
end, and saves the final checkpoint; its own state (parameters, optimizer, version, per-worker clocks)
is checkpointed atomically by the algorithm (checkpoint_dir), from which a restarted server resumes
(`--resume auto`; apps.launch restarts a server that dies) and the workers, which reconnect by themselves,
go on. A preemption (SIGTERM/SIGUSR1 to the server, or every worker pausing on its own) ends the run with
a preempt checkpoint and the workers' step counts, from which `--resume auto` continues. With servers > 1
server 0 gathers the other shards before each evaluation and at the end; the
other servers serve their shard and log on stderr."""

from __future__ import annotations

import time
from typing import Any

from algorithms.ps.server import default_log
from apps.metrics import algorithm_quantities
from apps.resume_point import WORKER_STEPS
from apps.run import Run


def serve(run: Run) -> bool:
    """Serve to the end or to a preemption; True when preempted (the server's checkpoint and a preempt
    checkpoint are saved; the workers paused and continue after `--resume auto` where the server's clocks
    say)."""
    cfg, opt, state, budget = run.cfg, run.opt, run.state, run.budget
    workers = len(opt.workers)
    losses: list[float] = []
    pushes = max(state.step * workers, opt.pushes_served())  # a restarted server goes on counting (apps.run)
    tic = time.time()

    def on_push(info: dict[str, Any]) -> None:
        nonlocal pushes, tic
        pushes += 1
        if info.get("loss") is not None:
            losses.append(float(info["loss"]))
        if pushes % workers:
            return
        state.step = pushes // workers
        state.epoch = state.step // budget.steps_per_epoch
        now = time.time()
        run.metrics.step(
            {
                "step": state.step,
                "epoch": state.epoch,
                "segment": 0,
                "time": run.elapsed(),
                "loss": sum(losses) / max(len(losses), 1),
                # the rate the workers' schedule gives this round's step (step N is taken at the
                # schedule's point N - 1, as apps.train's rows log it; each push carries its own
                # worker's rate, and workers at different steps have different ones)
                "lr": run.lr_sched.rates_at(state.step - 1)[0],
                "samples_per_s": workers * cfg.data.batch_size / max(now - tic, 1e-9),
                "tokens_per_s": None,
                "mfu": None,
                **algorithm_quantities(opt, run.dist.size),
            }
        )
        losses.clear()
        tic = now
        if state.step % budget.eval_every == 0:
            opt.pull()  # server 0 gathers the other servers' shards: it scores the whole model
            run.evaluate(state.epoch)
        run.after_step()

    log = run.metrics.message if run.dist.rank == 0 else default_log  # only rank 0 writes the metrics
    summary = opt.serve(on_push=on_push, log=log, should_stop=lambda: run.preempt.requested)
    lost = ", ".join(f"{w} ({why})" for w, why in sorted(summary["lost"].items())) or "none"
    log(
        f"server {run.dist.rank}: {summary['version']} versions; workers finished: "
        f"{', '.join(map(str, summary['finished'])) or 'none'}; lost: {lost}; staleness max "
        f"{summary['max_staleness']}, mean {summary['mean_staleness']:.2f}; rejected {summary['rejected']}"
    )
    # where each worker continues after a resume (a finished one: nothing left), as the server's clocks say
    state.extra[WORKER_STEPS] = {w: c + 1 for w, c in opt.server.clocks.items()}
    if summary["preempted"]:
        path = run.ckpt.save(state, "preempt", run.elapsed())
        cause = f"signal {run.preempt.signal}" if run.preempt.requested else "the workers paused"
        log(
            f"preempted ({cause}) at step "
            f"{state.step}: saved {path}; workers paused: {', '.join(map(str, sorted(summary['paused'])))}; "
            "continue with --resume auto"
        )
        return True
    evaluated = state.step % budget.eval_every == 0 and state.step >= budget.total_steps
    state.step = max(state.step, budget.total_steps)
    state.epoch = state.step // budget.steps_per_epoch
    ev = None if evaluated else run.evaluate(state.epoch)
    if ev is not None:
        state.best_loss = min(state.best_loss, ev["loss"])
    run.ckpt.save(state, "periodic", run.elapsed())
    return False
