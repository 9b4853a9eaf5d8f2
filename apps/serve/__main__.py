"""`python -m apps.serve [--nproc P] [--checkpoint RUN_DIR|PATH] [--port 8080] [--host 127.0.0.1]`
(installed as `pycomm-serve`)

Serves the char GPT of an apps.train run split into P pipeline stages on P ranks (started like
apps.train's: `--nproc` re-runs itself under mpirun; under srun / mpirun each process is one rank).
Rank 0 runs the HTTP server and stage 0; without --checkpoint the GPT is randomly initialised.
A run is served from any directory: --checkpoint takes its path (runs/NAME, or one checkpoint in
it), and the vocabulary comes from the checkpoint itself, not from the run's (relative) data.path.
API, window rule, limits and access (the API key: PYCOMM_SERVE_API_KEY): apps/serve/README.md."""

from __future__ import annotations

import argparse
import os
import signal
import sys

import torch

from apps import failure, launch, requirements
from apps.apps_settings import SERVE_API_KEY_ENV
from apps.command_name import command_name
from apps.train import _positive_int

DTYPES = {"float32": torch.float32, "float64": torch.float64}
API_KEY_ENV = SERVE_API_KEY_ENV  # rather than --api-key: a command line is visible to every user (ps)
# when a rank dies, rank 0 ends every open stream with an error event between Open MPI's SIGTERM and its
# SIGKILL: 5 s for that, not Open MPI's 1 s, which a loaded rank 0 can miss
SIGKILL_GRACE_S = 5


def _bounded(kind: type, low: float, high: float, what: str):
    """An argparse type: a number of `kind` (int or float) in [low, high]."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a {'whole number' if kind is int else 'number'} ({what}), got {text!r}"
            ) from None
        if not low <= value <= high:
            shown = str if kind is int else (lambda v: f"{v:g}")
            raise argparse.ArgumentTypeError(
                f"must be between {shown(low)} and {shown(high)} ({what}), got {shown(value)}"
            )
        return value

    return parse


def _bounded_int(low: int, high: int, what: str):
    return _bounded(int, low, high, what)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=command_name("apps.serve", "pycomm-serve"),
        description="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nproc", type=_positive_int, default=1, help="pipeline stages = ranks on this machine (default 1)")
    p.add_argument(
        "--checkpoint",
        metavar="RUN_DIR|PATH",
        help="an apps.train run directory (its newest checkpoint) or a checkpoint; default: random GPT",
    )
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--slots", type=_positive_int, default=32, help="sequences generated at once (KV cache rows)")
    p.add_argument("--queue", type=_positive_int, default=64, help="requests that may wait for a slot; more get 503")
    p.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the served model, e.g. model.options.n_layer=2 (random GPT)",
    )
    p.add_argument(
        "--window-keep",
        type=_bounded_int(1, 2**20, "tokens"),
        metavar="TOKENS",
        help="generation past the context: when a sequence would pass the model's block_size, it restarts "
        "from its last TOKENS tokens (re-prefilled on every stage); default half the block size",
    )
    p.add_argument(
        "--max-tokens-limit",
        type=_bounded_int(1, 2**20, "tokens"),
        default=4096,
        metavar="TOKENS",
        help="the most tokens one request may ask for (default 4096)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_bounded_int(1024, 2**30, "bytes"),
        default=1 << 20,
        metavar="BYTES",
        help="larger request bodies get 413 before they are read (default 1 MiB)",
    )
    p.add_argument(
        "--model-name",
        metavar="NAME",
        help="the model's id in /v1/models and /v1 requests (default: the run's name, or gpt-random)",
    )
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="the served weights' and activations' dtype (float64: exact comparisons; default float32)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV) or None,
        metavar="KEY",
        help="require `Authorization: Bearer KEY` on every request but GET /health; better set "
        f"{API_KEY_ENV} (a command line is visible to other users of the machine); default: no key",
    )
    p.add_argument(
        "--limit-concurrency",
        type=_bounded_int(1, 2**20, "connections"),
        metavar="N",
        help="connections open at once; one more is answered 503 and closed (default 1000, or fewer "
        "when the hard limit on open files is lower)",
    )
    p.add_argument(
        "--header-timeout",
        type=_bounded(float, 0.1, 3600.0, "seconds"),
        default=10.0,
        metavar="SECONDS",
        help="a connection that sends no whole request head within this is closed (default 10)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=_bounded_int(1, 3600, "seconds"),
        default=5,
        metavar="SECONDS",
        help="an idle connection between requests is closed after this (default 5)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=_bounded_int(1024, 2**20, "bytes"),
        default=16384,
        metavar="BYTES",
        help="a request head (request line and headers) larger than this gets 400 (default 16384)",
    )
    args = p.parse_args(argv)
    if args.api_key is not None and not args.api_key.strip():
        p.error("--api-key: must not be empty")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        requirements.check_serve()
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {args.port}")
        from apps.serve.connection_limits import ensure_descriptors

        # here: the ranks that --nproc starts inherit the raised limit
        args.limit_concurrency = ensure_descriptors(args.limit_concurrency)
    except (requirements.MissingDependencyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if launch.should_spawn(args.nproc):
        return launch.spawn(
            args.nproc,
            argv,
            module="apps.serve",
            stop_signals=(signal.SIGTERM, signal.SIGUSR1, signal.SIGINT),
            term_grace_s=SIGKILL_GRACE_S,
        )
    launch.export_rendezvous(launch.detect())
    try:
        return serve(args)
    except (Exception, KeyboardInterrupt) as e:
        return failure.fail(e)


def serve(args: argparse.Namespace) -> int:
    from apps.dist import Dist
    from apps.serve import model_source, stage_messages
    from apps.serve.engine import serve_stage
    from apps.serve.stage import Stage

    dist = Dist.init()
    torch.set_grad_enabled(False)
    served = model_source.load(args.checkpoint, args.override, DTYPES[args.dtype])
    block_size = served.model.block_size
    args.window_keep = block_size // 2 if args.window_keep is None else args.window_keep
    if args.window_keep > block_size:  # on every rank: each stops with this message, none waits on another
        from apps.config.schema import ConfigError

        raise ConfigError(f"--window-keep {args.window_keep}: at most the model's block_size {block_size}")
    stage = Stage(served.model, dist.rank, dist.size, args.slots)
    link = stage_messages.Link(dist.comm, dist.rank, dist.size) if dist.size > 1 else None
    pids = torch.zeros(dist.size, dtype=torch.int64)
    if dist.size > 1:
        dist.comm.allgather(pids, torch.tensor([os.getpid()], dtype=torch.int64))
    else:
        pids[0] = os.getpid()
    if dist.rank > 0:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            signal.signal(s, signal.SIG_IGN)  # rank 0 leads the shutdown: it stops the pipeline with a message
        serve_stage(stage, link)
        return 0
    from apps.serve.http_server import run_rank0

    return run_rank0(args, served, stage, link, pids.tolist())


if __name__ == "__main__":
    sys.exit(main())
