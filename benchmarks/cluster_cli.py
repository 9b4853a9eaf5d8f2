"""`python -m benchmarks.cluster up | run | down`: the emulated cluster of benchmarks/cluster.py from the
command line (up: make it and print how to launch on it; run: up, mpirun a program on every rank, down;
down: remove it, idempotent)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from typing import Optional, Sequence

from benchmarks.cluster import DEFAULT_NAME, RATES, Cluster, address, down, hostname, unavailable
from benchmarks.run_ranks import ROOT, worker_env


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd in ("up", "run"):
        p = sub.add_parser(cmd)
        p.add_argument("--nodes", type=int, default=2)
        p.add_argument("--ranks-per-node", type=int, default=1)
        p.add_argument("--rate", default="1gbit", help=f"inter-node rate ({', '.join(RATES)}; none: unshaped)")
        p.add_argument("--name", default=DEFAULT_NAME)
    sub.choices["run"].add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS: run under mpirun")
    sub.add_parser("down").add_argument("--name", default=DEFAULT_NAME)
    args = parser.parse_args(argv)
    if args.command == "down":
        down(args.name)
        return 0
    reason = unavailable()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    rate = None if args.rate.lower() == "none" else args.rate
    cluster = Cluster(args.nodes, args.ranks_per_node, rate, args.name)
    if args.command == "up":
        try:
            cluster.up()
        except RuntimeError as e:
            print(f"cluster up: {e}", file=sys.stderr)
            return 1
        where = ", ".join(f"{hostname(k)}={address(k)}" for k in range(cluster.nodes))
        print(
            f"cluster {cluster.name}: {cluster.nodes} nodes x {cluster.ranks_per_node} ranks, "
            f"{rate or 'unshaped'} between nodes ({where})"
        )
        print(f"on node 0:  {shlex.join(cluster.enter(0))} COMMAND...")
        print(f"mpirun:     {shlex.join(cluster.mpirun_argv())} COMMAND...")
        print(f"remove:     python -m benchmarks.cluster down --name {cluster.name}")
        return 0
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("run: give the program after --, e.g. run -- python -m my.module")
    with cluster:
        return subprocess.run([*cluster.mpirun_argv(), *program], cwd=ROOT, env=worker_env()).returncode
