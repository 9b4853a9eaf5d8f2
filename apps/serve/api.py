"""The HTTP API (FastAPI) on rank 0: the Service that every endpoint submits generations through,
and the app: SmolCluster's endpoints (apps.serve.smolcluster_routes), the OpenAI-compatible /v1
(apps.serve.openai_routes), GET /health, /config, /metrics, and the web page (GET / and /app.js).
Errors: apps.serve.http_errors (one JSON shape per API); bodies over the limit: apps.serve.body_limit;
the API key and the Host check: apps.serve.access. No OpenAPI schema or docs pages are served.
An error after a stream started is its final event, never a dropped connection: also when the
server stops or the pipeline fails (Service.end_streams)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse

from apps.serve import openai_routes, smolcluster_routes
from apps.serve import request_checks as checks
from apps.serve.access import Access
from apps.serve.body_limit import BodyLimit
from apps.serve.chat_sessions import SessionStore
from apps.serve.engine import Engine
from apps.serve.http_errors import BadRequest, error_response, install
from apps.serve.request_checks import Limits
from apps.serve.scheduler import Generation, QueueFull, Scheduler
from apps.serve.scheduler import Request as GenRequest
from apps.serve.serve_metrics import ServeMetrics

STATIC = Path(__file__).resolve().parent / "static"
PAGE = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript")}
POLL_DISCONNECT_S = 0.5  # how often a request checks that its client is still there


@dataclass(eq=False)
class OpenGeneration:
    """A submitted generation and the queue its events arrive on (in the request's event loop)."""

    gen: Generation
    events: asyncio.Queue
    emit: Callable[[dict[str, Any]], None]


@dataclass
class Service:
    engine: Engine
    scheduler: Scheduler
    metrics: ServeMetrics
    limits: Limits
    info: dict[str, Any]  # GET /config
    model_id: str  # /v1/models
    pids: list[int]  # GET /health: every rank's process (the launcher's tests check they end)
    sessions: SessionStore = field(default_factory=SessionStore)
    open: set[OpenGeneration] = field(default_factory=set)
    open_lock: threading.Lock = field(default_factory=threading.Lock)
    stop_message: str | None = None  # set once the server stops: new requests get 503

    def submit(self, req: GenRequest) -> OpenGeneration:
        if self.stop_message or self.engine.error is not None or self.engine.stopping:
            raise BadRequest("server", self.stop_message or "the pipeline is stopping", status=503)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(event: dict[str, Any]) -> None:  # any thread -> this request's event loop
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the loop is closed: the server is gone
                pass

        try:
            gen = self.scheduler.submit(req, self.limits.vocab.decoder(), emit)
        except QueueFull as e:
            raise BadRequest("queue", str(e), status=503) from None
        return OpenGeneration(gen, events, emit)

    def submit_many(self, req: GenRequest, n: int) -> list[OpenGeneration]:
        """`n` independent samples of one request (seeds seed, seed+1, ...); all or none are queued."""
        ogs: list[OpenGeneration] = []
        try:
            for i in range(n):
                ogs.append(self.submit(replace(req, seed=checks.nth_seed(req.seed, i))))
        except BadRequest:
            for og in ogs:
                self.scheduler.cancel(og.gen)
            raise
        return ogs

    async def events(self, og: OpenGeneration, request: Request) -> AsyncIterator[dict[str, Any]]:
        """The generation's events until the final one; cancels it when the client leaves."""
        async for _, event in self.merged([og], request):
            yield event

    async def merged(self, ogs: list[OpenGeneration], request: Request) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """(index, event) of every generation's events as they come, until each sent its final one.
        Every POLL_DISCONNECT_S the client is checked (also while tokens keep coming: a whole answer
        sends nothing until the end, so only this notices a client that left); when it left, every
        generation is cancelled and its slot freed."""
        with self.open_lock:
            self.open.update(ogs)
        waiting = {asyncio.ensure_future(og.events.get()): i for i, og in enumerate(ogs)}
        next_check = time.monotonic() + POLL_DISCONNECT_S
        try:
            while waiting:
                done, _ = await asyncio.wait(
                    waiting, timeout=max(0.0, next_check - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
                )
                if time.monotonic() >= next_check:
                    if await request.is_disconnected():
                        return
                    next_check = time.monotonic() + POLL_DISCONNECT_S
                for task in sorted(done, key=waiting.__getitem__):
                    i = waiting.pop(task)
                    event = task.result()
                    yield i, event
                    if not event.get("done"):
                        waiting[asyncio.ensure_future(ogs[i].events.get())] = i
        finally:
            for task in waiting:
                task.cancel()
            with self.open_lock:
                self.open.difference_update(ogs)
            for og in ogs:
                self.scheduler.cancel(og.gen)  # nothing when it finished; else its slot is freed

    async def finals(self, ogs: list[OpenGeneration], request: Request) -> list[dict[str, Any]]:
        """The final events of generations answered as a whole; BadRequest (503) when one failed."""
        last: list[dict[str, Any]] = [{} for _ in ogs]
        async for i, event in self.merged(ogs, request):
            last[i] = event
        for event in last:
            if "error" in event or not event.get("done"):
                raise BadRequest("server", event.get("error", "the generation ended without an answer"), status=503)
        return last

    async def final(self, og: OpenGeneration, request: Request) -> dict[str, Any]:
        return (await self.finals([og], request))[0]

    def end_streams(self, message: str) -> None:
        """Every open generation gets a final error event now (from any thread; e.g. a stop signal
        or a failed pipeline, before this rank goes down)."""
        self.stop_message = message
        with self.open_lock:
            targets = list(self.open)
        for og in targets:
            og.emit(
                {
                    "token": "",
                    "done": True,
                    "error": message,
                    "full_text": "".join(og.gen.text),
                    "num_tokens": len(og.gen.tokens),
                }
            )

    def end_streams_and_wait(self, message: str, timeout: float) -> None:
        self.end_streams(message)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.open_lock:
                if not self.open:
                    return
            time.sleep(0.05)


def create_app(service: Service, max_body_bytes: int, api_key: str | None = None, check_host: bool = False) -> Access:
    """The ASGI app uvicorn serves: the FastAPI app behind the body limit, behind the access checks
    (`check_host`: answer only loopback names in Host, for a server bound to loopback)."""

    # docs off, and the schema with them: it lists every endpoint and field to whoever asks
    app = FastAPI(title="pycomm apps.serve", docs_url=None, redoc_url=None, openapi_url=None)
    install(app)
    smolcluster_routes.add(app, service)
    openai_routes.add(app, service)

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        ok = service.engine.error is None and service.engine.thread.is_alive() and not service.stop_message
        body: dict[str, Any] = {"status": "ok" if ok else "error", "healthy": ok, "stages": service.engine.stages}
        if getattr(request.state, "authorized", True):  # the processes, only to a caller with the key (access.py)
            body["pids"] = service.pids
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/config")
    async def config() -> dict[str, Any]:
        return service.info

    @app.get("/metrics")
    async def metrics() -> dict[str, Any]:
        return {**service.scheduler.counts(), **service.metrics.snapshot()}

    def page_file(name: str, media_type: str) -> Callable:
        async def serve_file(request: Request) -> Any:
            path = STATIC / name
            if not path.is_file():  # a broken install: setup.py's package data ships static/
                return error_response(
                    request.url.path, 500, f"{path} is not installed (pip install . ships apps/serve/static/)"
                )
            return FileResponse(path, media_type=media_type, headers={"Cache-Control": "no-cache"})

        return serve_file

    for route, (name, media_type) in PAGE.items():
        app.add_api_route(route, page_file(name, media_type), methods=["GET"], include_in_schema=False)

    return Access(BodyLimit(app, max_body_bytes), api_key, check_host)
