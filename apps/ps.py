"""`python -m apps.ps server|worker --address HOST:PORT --workers N [--rank R] [CONFIG ...] [apps.train options]`

Starts one process of a fault-tolerant run by hand, as SmolCluster's users do (one command per machine,
the same config everywhere): `server` is rank 0 and listens on HOST:PORT; `worker --rank R` (1..N) connects
to it. With algorithm option servers=S the servers are ranks 0..S-1 (`server --rank R`, rank r listening on
PORT + r, or give every rank's address with --addresses) and the workers S..S+N-1. For an algorithm without
a server (bounded-staleness peers) the N workers are ranks 0..N-1. No MPI is involved: a process that
dies ends no other. Every process needs the run's secret in PYCOMM_PS_SECRET (the same everywhere; make one
with `python -c 'import secrets; print(secrets.token_hex(32))'` and pass it through the environment, never
on a command line): messages not signed with it are dropped (docs/security.md). A server runs under a supervisor that restarts it with `--resume auto` when it dies
(at most PYCOMM_PS_SERVER_RESTARTS times): it continues from its checkpoint while the workers reconnect.
Everything after the role's options is passed to `python -m apps.train`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Sequence

from algorithms.ps import layout
from apps import launch, optim, train
from apps.config import loading
from apps.supervisor import Supervisor
from pycomm import settings


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="python -m apps.ps", description=__doc__.split("\n\n")[1])
    p.add_argument("role", choices=("server", "worker"))
    p.add_argument("--address", required=True, help="HOST:PORT of rank 0 (the server)")
    p.add_argument("--workers", type=int, required=True, help="how many workers the run has")
    p.add_argument(
        "--rank", type=int, help="this process's rank (servers 0..S-1, then the workers; 0..N-1 without a server)"
    )
    p.add_argument(
        "--addresses", help="HOST:PORT of every rank, comma-separated (serverless peers on several machines)"
    )
    return p.parse_known_args(argv)


def role_env(args: argparse.Namespace, servers: int) -> dict[str, str]:
    """The PYCOMM_PS_* environment of this process (algorithms.ps.layout reads it); `servers`: how many
    ranks serve (0 for an algorithm without a server)."""
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    world = args.workers + servers
    if args.role == "server":
        if not servers:
            raise ValueError("this config's algorithm has no server: start every process as `worker --rank R`")
        rank = 0 if args.rank is None else args.rank
        if not 0 <= rank < servers:
            raise ValueError(f"server --rank must be in 0..{servers - 1} for servers={servers}, got {rank}")
    else:
        first = servers
        if args.rank is None or not first <= args.rank < world:
            raise ValueError(
                f"worker --rank must be in {first}..{world - 1} for {args.workers} workers, got {args.rank}"
            )
        rank = args.rank
    secret = settings.get(layout.SECRET_ENV)
    if secret is None:
        raise ValueError(
            f"{layout.SECRET_ENV} is not set: export the same secret on every process of the run "
            "(e.g. from `python -c 'import secrets; print(secrets.token_hex(32))'`); it is never "
            "given on the command line, where other users of the machine could read it"
        )
    env = layout.env_for(rank, world, args.address, secret)
    if args.addresses:
        env[layout.ADDRESSES_ENV] = args.addresses
    return env


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(sys.argv[1:] if argv is None else argv)
    targs = train.parse_args(rest)
    try:
        cfg = loading.resolve(
            targs.configs + targs.config, targs.override, lambda c: args.workers + optim.server_ranks(c.algorithm)
        ).config
        if not optim.independent(cfg.algorithm):
            raise ValueError(
                f"algorithm.name={cfg.algorithm.name} runs as one MPI job: start it with "
                "`python -m apps.train --nproc N` or mpirun; apps.ps starts fault-tolerant algorithms"
            )
        env = role_env(args, optim.server_ranks(cfg.algorithm))
    except (loading.ConfigError, ValueError) as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    os.environ.update(env)
    os.environ[launch.SPAWNED] = "1"  # this process is one rank: apps.train must not spawn others
    if args.role == "server":  # in a child process, restarted from its checkpoint when it dies
        rank = int(env[layout.RANK_ENV])
        return Supervisor(_start, rest, [rank], [rank], lambda procs: True, prefix="apps.ps").wait()[rank]
    return train.main(rest)


def _start(rank: int, argv: Sequence[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "apps.train", *argv])


if __name__ == "__main__":
    sys.exit(main())
