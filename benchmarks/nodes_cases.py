"""The methods benchmarks/nodes.py races on the emulated cluster, and how one run of each is launched and read
back: every case trains the same problem (benchmarks/nodes_problem.py's; apps.train's embedded default unless
told otherwise) and is scored on the same eval split at the same steps. Its curve is [(step, seconds, eval
loss)] where seconds is the training clock with the evaluations taken out (they cost every case the same and
are no part of the method)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks.cluster import Cluster
from benchmarks.nodes_problem import BATCH, Problem
from benchmarks.run_ranks import ROOT

# torchft's DiLoCo settings, which pycomm's DiLoCo cases take: 3 fragments every 24 steps, one step of delay
TORCHFT_DILOCO = "inner_steps: 24, fragments: 3, sync_delay: 1, mixing: 0.5"
EVAL_EVERY = 25  # steps between evaluations, every case
DONE = re.compile(r"done: (\d+) steps in ([\d.]+)s")
Curve = list[tuple[int, float, float]]


@dataclass(frozen=True)
class Case:
    name: str
    peer: bool  # a torch method (the peers), not pycomm's
    overrides: Callable[[Cluster], list[str]]  # apps.train's -o options (pycomm); torch peers: the worker's flags
    independent: bool = False  # every rank alone, no communication at all (a ceiling)
    torchft: bool = False  # a peer under torchft: a replica group per node
    gloo: bool = False  # apps.train under torchrun: pycomm's gloo backend, not MPI
    bare: bool = False  # pycomm in the peers' bare loop (benchmarks/workers/nodes_diloco.py) under mpirun
    # apps.train's train.preempt_check_every: the ranks' agreement on a pending preemption, a blocking all-reduce
    # across the slow link every that many steps (none in the peers' loops or in a lone rank)
    preempt_check_every: int = 1

    @property
    def agreements_per_step(self) -> float:
        """apps.train's preemption all-reduces per step: one more latency-bound collective across the link."""
        return 0.0 if self.peer or self.bare or self.independent else 1 / self.preempt_check_every


def _algo(name: str, options: str = "{}") -> list[str]:
    return ["-o", f"algorithm.name={name}", "-o", f"algorithm.options={options}"]


def _hsdp(c: Cluster, sharding: str = "") -> list[str]:
    """Replicas across the nodes (dp_replicate: the slow link), shards within a node (dp_shard); `sharding`: the
    ZeRO stage under a method that is not one itself."""
    return [
        "-o",
        f"parallel.dp_replicate={c.nodes}",
        "-o",
        f"parallel.dp_shard={c.ranks_per_node}",
        *(["-o", f"parallel.sharding={sharding}"] if sharding else []),
    ]


CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case("ddp", True, lambda c: []),
        Case("fsdp2-hsdp", True, lambda c: ["--fsdp2"]),
        # torchft's DiLoCo and LocalSGD (fp32: its quantization is CUDA-only), against pycomm's with the same settings
        Case("torchft-diloco", True, lambda c: ["diloco", "24", "--nodes", str(c.nodes)], torchft=True),
        Case("torchft-localsgd", True, lambda c: ["localsgd", "8", "--nodes", str(c.nodes)], torchft=True),
        Case("mbsgd", False, lambda c: _algo("mbsgd")),
        Case("mbsgd+int8", False, lambda c: _algo("mbsgd", "{codec: int8}")),
        Case("mbsgd-gloo", False, lambda c: _algo("mbsgd"), gloo=True),
        Case("mbsgd+int8-gloo", False, lambda c: _algo("mbsgd", "{codec: int8}"), gloo=True),
        Case("mbsgd+1bit", False, lambda c: _algo("mbsgd", "{codec: onebit}")),
        Case("mbsgd-nocomm", False, lambda c: _algo("mbsgd"), independent=True),
        Case("zero3", False, lambda c: _algo("zero3")),
        Case("hsdp-zero2", False, lambda c: [*_algo("zero2"), *_hsdp(c)]),
        Case("hsdp+plsgd", False, lambda c: [*_algo("plsgd", "{averaging_freq: 8}"), *_hsdp(c, "zero3")]),
        # Streaming DiLoCo on the master shards: 3 fragments, one step of overlap, 4-bit outer gradients
        Case(
            "hsdp+diloco",
            False,
            lambda c: [
                *_algo("diloco", f"{{{TORCHFT_DILOCO}, codec: int4}}"),
                *_hsdp(c, "zero2"),
            ],
        ),
        Case(
            "diloco-torchft-settings",
            False,
            lambda c: [
                *_algo("diloco", f"{{{TORCHFT_DILOCO}}}"),
                *_hsdp(c, "zero2"),
            ],
        ),
        # the same rule through apps.train without HSDP and without its per-step collective (the ranks' agreement
        # on a pending preemption, train.preempt_check_every=1 by default: a blocking all-reduce across the slow
        # link every step, which torchft's loop does not have), and in torchft's own bare loop with its fragments:
        # the like-for-like comparison
        Case(
            "diloco-apps",
            False,
            lambda c: _algo("diloco", f"{{{TORCHFT_DILOCO}}}"),
            preempt_check_every=24,
        ),
        Case("diloco-bare", False, lambda c: ["24"], bare=True),
        Case("qsr", False, lambda c: _algo("qsr")),
        Case("lsgd", False, lambda c: _algo("lsgd")),
    ]
}


def _popen(argv: list[str], cluster: Cluster) -> subprocess.Popen:
    """One launch on the cluster, its output (stdout and stderr together) read by _communicate."""
    return subprocess.Popen(
        argv, cwd=ROOT, env=cluster.launch_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _communicate(procs: list[subprocess.Popen], timeout: float) -> tuple[list[int], str]:
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [p.returncode for p in procs], "\n".join(outs)


def _apps_train(
    cluster: Cluster, problem: Problem, case: Case, steps: int, seed: int, out_dir: Path, timeout: float
) -> tuple[list[int], str]:
    ranks = 1 if case.independent else cluster.size  # an epoch is the training split, in steps of ranks x BATCH
    common = [
        *problem.apps_options,
        "-o",
        f"out_dir={out_dir}",
        *case.overrides(cluster),
        "-o",
        "train.epochs=0",
        "-o",
        f"train.max_steps={steps}",
        "-o",
        "checkpoint.every_steps=0",
        "-o",
        "logging.plot=false",
        "-o",
        f"train.preempt_check_every={case.preempt_check_every}",
        "-o",
        f"train.seed={seed}",
        "-o",
        f"train.eval_every_epochs={EVAL_EVERY * BATCH * ranks / train_samples(problem)}",
    ]
    if case.gloo:  # apps.train joins torchrun's launch over gloo; node 0's writes the run's files
        argvs = cluster.torchrun_argvs(["-m", "apps.train", "-o", f"name={case.name}", *common])
        return _communicate([_popen(a, cluster) for a in argvs], timeout)
    if not case.independent:
        argv = [*cluster.mpirun_argv(), sys.executable, "-m", "apps.train", "-o", f"name={case.name}", *common]
        return _communicate([_popen(argv, cluster)], timeout)
    # one lone rank per node slot, all at once: the same script and compute with no communication
    procs = [
        _popen(
            [
                *cluster.enter(k // cluster.ranks_per_node),
                sys.executable,
                "-m",
                "apps.train",
                "--nproc",
                "1",
                "-o",
                f"name={case.name}{'' if k == 0 else k}",
                *common,
            ],
            cluster,
        )
        for k in range(cluster.size)
    ]
    return _communicate(procs, timeout)


def apps_curve(run_dir: Path) -> tuple[Curve, float]:
    """(curve, training seconds at the last step) of an apps.train run: its eval records' times less the time
    spent in the evaluations before (each evaluation's length: its record's time less its step's)."""
    step_time = {r["step"]: r["time"] for r in map(json.loads, (run_dir / "train.jsonl").read_text().splitlines())}
    curve, evals, last = [], 0.0, max(step_time)
    for r in map(json.loads, (run_dir / "eval.jsonl").read_text().splitlines()):
        curve.append((r["step"], step_time[r["step"]] - evals, r["loss"]))
        evals += r["time"] - step_time[r["step"]] if r["step"] < last else 0.0
    return curve, step_time[last] - evals


@functools.cache
def train_samples(problem: Problem) -> int:
    """The samples of `problem`'s training split (apps.train's epoch)."""
    return len(problem.splits().train)


def run_case(
    cluster: Cluster, problem: Problem, case: Case, steps: int, seed: int, out_dir: Path, timeout: float
) -> dict:
    """One run of `case` on `problem` with `seed` (the model's initialisation and the data order): its curve,
    training seconds, launch wall seconds and the bytes that crossed node 1's link (in + out, the run's whole
    traffic between the nodes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before, start = cluster.link_bytes(1), time.perf_counter()
    evals = out_dir / f"{case.name}.json"
    worker = "nodes_diloco" if case.bare else "nodes_torchft" if case.torchft else "nodes_ddp"
    argv = [
        "-m",
        f"benchmarks.workers.{worker}",
        str(steps),
        str(EVAL_EVERY),
        str(evals),
        *case.overrides(cluster),
        "--problem",
        problem.name,
        "--seed",
        str(seed),
    ]
    if case.bare:  # pycomm's own launch: mpirun over the nodes
        codes, text = _communicate([_popen([*cluster.mpirun_argv(), sys.executable, *argv], cluster)], timeout)
    elif case.peer:
        argvs = (
            [
                [
                    *cluster.enter(k),
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc-per-node",
                    str(cluster.ranks_per_node),
                    *argv,
                ]
                for k in range(cluster.nodes)
            ]
            if case.torchft
            else cluster.torchrun_argvs(argv)
        )  # torchft: each node its own group
        procs = [_popen(a, cluster) for a in argvs]
        codes, text = _communicate(procs, timeout)
    else:
        codes, text = _apps_train(cluster, problem, case, steps, seed, out_dir, timeout)
    wall = time.perf_counter() - start
    crossed = sum(cluster.link_bytes(1)) - sum(before)
    done = DONE.findall(text)
    if any(codes) or not done or any(int(d[0]) != steps for d in done):
        raise RuntimeError(f"{case.name}: exit codes {codes}, expected 'done: {steps} steps'\n{text[-3000:]}")
    if case.peer or case.bare:
        got = json.loads(evals.read_text())
        curve, train_s = [tuple(p) for p in got["curve"]], got["train_s"]
    else:
        curve, train_s = apps_curve(out_dir / case.name)
    return {"curve": curve, "train_s": train_s, "wall_s": wall, "bytes_across": crossed}
