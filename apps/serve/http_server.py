"""Rank 0: the engine thread, the FastAPI app under uvicorn, and a clean stop. SIGINT, SIGTERM or
SIGUSR1 (what the `--nproc` launcher forwards for SIGINT/SIGTERM): streams in progress end at once
with an error event, the engine drains the pipeline and sends STOP down it, every rank exits 0.
When a rank dies, Open MPI sends the others SIGTERM about a second later and SIGKILL 5 s after that
(apps.serve.__main__.SIGKILL_GRACE_S): the open streams' final error event goes out in between."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from typing import Any, Iterator

from apps.serve import log_limit, stage_messages
from apps.serve.access import is_loopback
from apps.serve.api import Service, create_app
from apps.serve.connection_limits import ConnectionLimits
from apps.serve.engine import Engine, describe_stages
from apps.serve.model_source import Served
from apps.serve.request_checks import Limits
from apps.serve.scheduler import Scheduler
from apps.serve.serve_metrics import ServeMetrics
from apps.serve.stage import Stage
from apps.serve.text_codec import Vocabulary

GRACEFUL_S = 5.0  # open connections get this long to finish once the server stops


def model_id(args: argparse.Namespace, served: Served) -> str:
    return args.model_name or ("gpt-random" if served.random else served.config.name)


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    return ConnectionLimits(args.limit_concurrency, args.header_timeout, args.keep_alive_timeout, args.max_header_bytes)


def config_info(args: argparse.Namespace, served: Served, stages: int) -> dict[str, Any]:
    """GET /config: what a client may know; no absolute path (where the server's files are) and no
    process id."""
    m = served.model
    return {
        "model": "gpt",
        "model_name": model_id(args, served),
        "source": served.public_source,
        "random_init": served.random,
        "notes": served.public_notes,
        "vocab": served.vocab,
        "vocab_size": len(served.vocab),
        "block_size": m.block_size,
        "n_layer": m.n_layer,
        "n_head": m.n_head,
        "n_embd": m.n_embd,
        "dtype": args.dtype,
        "parameters": sum(p.numel() for p in m.parameters()),
        "stages": describe_stages(stages, m.n_layer),
        "slots": args.slots,
        "queue_limit": args.queue,
        "max_tokens_limit": args.max_tokens_limit,
        "window_keep": args.window_keep,
        "max_body_bytes": args.max_body_bytes,
        "available_worker_ranks": [0],
        "created": int(time.time()),
        "api_key_required": args.api_key is not None,
        "limit_concurrency": args.limit_concurrency,
    }


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def _uvicorn_server(config: Any) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # ours are installed (uvicorn's would re-raise the signal after shutdown: exit -15, not 0)

    return Server(config)


def run_rank0(
    args: argparse.Namespace, served: Served, stage: Stage, link: stage_messages.Link | None, pids: list[int]
) -> int:
    import uvicorn

    info = config_info(args, served, stage.count)
    block_size = served.model.block_size
    scheduler = Scheduler(args.slots, args.queue, stage.count, block_size, args.window_keep)
    metrics = ServeMetrics(info["stages"])
    engine = Engine(stage, link, scheduler, metrics)
    limits = Limits(Vocabulary(served.vocab), block_size, args.max_tokens_limit)
    service = Service(engine, scheduler, metrics, limits, info, info["model_name"], pids)
    engine.on_failure = service.end_streams_and_wait
    conn_limits = connection_limits(args)
    app = create_app(service, args.max_body_bytes, args.api_key, check_host=is_loopback(args.host))
    server = _uvicorn_server(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            timeout_graceful_shutdown=GRACEFUL_S,
            lifespan="off",
            **conn_limits.uvicorn_options(),
        )
    )
    log_limit.install()  # after uvicorn.Config: it configures the loggers the filter goes on

    def stop(signum: int, frame: object) -> None:
        # at once: after a rank died, Open MPI's SIGKILL follows its SIGTERM within about a second
        service.end_streams(
            f"the server is stopping (signal {signal.Signals(signum).name}: stopped by its user, "
            "or a rank of the pipeline died)"
        )
        engine.begin_stop()
        server.should_exit = True

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)

    for note in served.notes:
        print(f"apps.serve: {note}", flush=True)
    layers = ", ".join(f"rank {s['rank']}: blocks {s['layers'][0]}..{s['layers'][1] - 1}" for s in info["stages"])
    print(
        f"apps.serve: GPT ({info['parameters']:,} parameters, {info['n_layer']} blocks) in {stage.count} pipeline "
        f"stage(s) ({layers}); http://{args.host}:{args.port}/",
        flush=True,
    )
    engine.start()
    try:
        server.run()
    finally:
        engine.stop()  # drains the micro-batches in flight, then STOP down the pipeline
    if not server.started:
        print(f"apps.serve: the HTTP server did not start on {args.host}:{args.port} (see above)", file=sys.stderr)
        return 1
    print("apps.serve: stopped", flush=True)
    return 0
