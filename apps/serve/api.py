"""The HTTP API (FastAPI), SmolCluster-compatible: POST /chat streams Server-Sent Events, POST /query
answers with the whole text, GET /health, /config, /metrics, and GET / the web page. Every error is
JSON with a message (`error`) and, for a bad field, its name (`field`); an error after a stream
started is its final event (done, with `error`), never a dropped connection."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from apps.serve.engine import Engine, random_seed
from apps.serve.metrics import ServeMetrics
from apps.serve.scheduler import Generation, QueueFull, Request as GenRequest, Scheduler
from apps.serve.text_codec import Vocabulary

STATIC = Path(__file__).resolve().parent / "static"
DEFAULT_MAX_TOKENS = 200
DEFAULT_TEMPERATURE = 0.8
INT64 = 2**63
POLL_DISCONNECT_S = 0.5   # how often a stream waiting for its next token checks that the client is still there


class ChatBody(BaseModel):
    """JSON types are strict: "5" is not a number, true is not 1."""
    model_config = ConfigDict(extra="ignore")
    prompt: StrictStr
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[Annotated[float, Field(strict=True, allow_inf_nan=False)]] = None
    top_k: Optional[StrictInt] = None
    seed: Optional[StrictInt] = None


class BadRequest(ValueError):
    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(f"{field}: {message}")
        self.field, self.status = field, status


def error(status: int, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": message, **({"field": field} if field else {})}, status_code=status)


@dataclass
class Service:
    engine: Engine
    scheduler: Scheduler
    metrics: ServeMetrics
    vocab: Vocabulary
    block_size: int
    info: dict[str, Any]   # GET /config

    def request(self, body: ChatBody) -> GenRequest:
        """Checked sampling options (BadRequest naming the field); the defaults filled in."""
        if not body.prompt:
            raise BadRequest("prompt", "must not be empty")
        try:
            ids = self.vocab.encode(body.prompt)
        except ValueError as e:
            raise BadRequest("prompt", str(e).removeprefix("prompt: ")) from None
        room = self.block_size - len(ids)
        if room < 1:
            raise BadRequest("prompt", f"is {len(ids)} tokens; the model's context (block_size) is {self.block_size}, "
                                       f"so at most {self.block_size - 1} leave room for an answer")
        max_tokens = min(DEFAULT_MAX_TOKENS, room) if body.max_tokens is None else body.max_tokens
        if not 1 <= max_tokens <= room:
            raise BadRequest("max_tokens", f"must be between 1 and {room} (block_size {self.block_size} minus the "
                                           f"prompt's {len(ids)} tokens), got {max_tokens}")
        temperature = DEFAULT_TEMPERATURE if body.temperature is None else body.temperature
        if temperature < 0:
            raise BadRequest("temperature", f"must be >= 0 (0 = greedy), got {temperature}")
        if body.top_k is not None and body.top_k < 1:
            raise BadRequest("top_k", f"must be >= 1 or null (no limit), got {body.top_k}")
        if body.seed is not None and not -INT64 <= body.seed < INT64:
            raise BadRequest("seed", f"must be a 64-bit integer, got {body.seed}")
        seed = random_seed() if body.seed is None else body.seed
        return GenRequest(ids, max_tokens, float(temperature), body.top_k, seed)

    def submit(self, body: ChatBody) -> tuple[Generation, asyncio.Queue]:
        if self.engine.error is not None or self.engine.stopping:
            raise BadRequest("server", "the pipeline is stopping", status=503)
        req = self.request(body)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(event: dict[str, Any]) -> None:   # engine thread -> this request's event loop
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:   # the loop is closed: the server is gone
                pass
        try:
            return self.scheduler.submit(req, self.vocab.decoder(), emit), events
        except QueueFull as e:
            raise BadRequest("queue", str(e), status=503) from None

    async def events(self, gen: Generation, events: asyncio.Queue, request: Request) -> AsyncIterator[dict]:
        """The generation's events until the final one; cancels it when the client leaves."""
        try:
            while True:
                try:
                    event = await asyncio.wait_for(events.get(), POLL_DISCONNECT_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return
                    continue
                yield event
                if event.get("done"):
                    return
        finally:
            self.scheduler.cancel(gen)   # nothing when it finished; else its slot is freed


def create_app(service: Service) -> FastAPI:
    app = FastAPI(title="pycomm apps.serve", docs_url=None, redoc_url=None)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        field = "body" if first.get("type") == "json_invalid" else ".".join(loc) or "body"
        return error(422, f"{field}: {first.get('msg')}", field)

    @app.exception_handler(BadRequest)
    async def bad(request: Request, exc: BadRequest) -> JSONResponse:
        return error(exc.status, str(exc), exc.field)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        return error(500, f"{type(exc).__name__}: {exc}")

    @app.post("/chat")
    async def chat(body: ChatBody, request: Request) -> StreamingResponse:
        gen, events = service.submit(body)

        async def stream() -> AsyncIterator[str]:
            async for event in service.events(gen, events, request):
                yield f"data: {json.dumps(event)}\n\n"
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/query")
    async def query(body: ChatBody, request: Request) -> JSONResponse:
        gen, events = service.submit(body)
        final: dict[str, Any] = {}
        async for event in service.events(gen, events, request):
            final = event
        if "error" in final:
            return error(503, final["error"])
        final.pop("token", None)
        final.pop("done", None)
        return JSONResponse({"response": final.get("full_text", ""), **final})

    @app.get("/health")
    async def health() -> JSONResponse:
        ok = service.engine.error is None and service.engine.thread.is_alive()
        body = {"status": "ok" if ok else "error", "stages": service.engine.stages, "pids": service.info["pids"]}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/config")
    async def config() -> dict[str, Any]:
        return service.info

    @app.get("/metrics")
    async def metrics() -> dict[str, Any]:
        return {**service.scheduler.counts(), **service.metrics.snapshot()}

    @app.get("/")
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/static/{name}")
    async def static(name: str) -> FileResponse:
        path = STATIC / name
        if path.parent != STATIC or not path.is_file():
            return error(404, f"no static file {name!r}")
        return FileResponse(path)

    return app
