"""SmolCluster's inference API as its docs/api.md gives it: POST /chat (Server-Sent Events) and
POST /query (one JSON answer) with `text` or `messages`, `max_tokens`, `temperature`, `top_p`,
`top_k`, `decoding_strategy` (greedy, sampling, top_p, top_k), `worker_rank`, `session_id`,
`use_memory`; and its memory endpoints GET /memory/status, GET /memory/history, POST /memory/clear.
`prompt` (this server's older name for `text`), `seed` and `stop` are accepted too.

Where this server differs, and why:
- decoding fields apply whenever they are given (SmolCluster's server applies them only with
  `use_hf_defaults: true`, which is accepted and has no effect here);
- `worker_rank`: one pipeline serves every request, so 0 (or none) is the only worker (as
  SmolCluster's model-parallel mode lists it); another value is refused with 400;
- memory is a bounded per-session history (apps.serve.chat_sessions), used by /chat when the request
  names a `session_id` and `use_memory` is not false: without a session_id a request is stateless
  (SmolCluster's default session is "default"), so a plain prompt's answer depends on nothing else.
  A session is its caller's: kept under the owner token of a cookie the server sets (a client that
  uses memory keeps cookies, as browsers and requests.Session / httpx.Client do), so another caller
  naming the same session_id has a session of its own and never reads this one.
  /query never reads or writes memory (as SmolCluster's)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, AsyncIterator, Optional, Union

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

from apps.serve import chat_sessions
from apps.serve import request_checks as checks
from apps.serve.chat_template import Message, Turn, last_user, render, turns
from apps.serve.http_errors import BadRequest
from apps.serve.request_checks import JsonFloat
from apps.serve.scheduler import Request as GenRequest

if TYPE_CHECKING:  # apps.serve.api imports this module
    from apps.serve.api import Service

DEFAULT_MAX_TOKENS = 200
DEFAULT_TEMPERATURE = 0.8
STRATEGY_DEFAULTS = {"top_k": 50, "top_p": 0.9}  # SmolCluster's own, when the strategy's parameter is not given
STRATEGIES = ("greedy", "sampling", "top_p", "top_k")
WORKER_RANK = 0  # the pipeline's entry: its only "worker"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class SmolBody(BaseModel):
    """JSON types are strict: "5" is not a number, true is not 1. Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")
    text: Optional[StrictStr] = None
    prompt: Optional[StrictStr] = None
    messages: Optional[list[Message]] = None
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[JsonFloat] = None
    top_p: Optional[JsonFloat] = None
    top_k: Optional[StrictInt] = None
    decoding_strategy: Optional[StrictStr] = None
    seed: Optional[StrictInt] = None
    stop: Union[StrictStr, list[StrictStr], None] = None
    worker_rank: Optional[StrictInt] = None
    session_id: Optional[StrictStr] = None
    use_memory: Optional[StrictBool] = None
    use_hf_defaults: Optional[StrictBool] = None


class ClearBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    session_ids: list[StrictStr]


def decoding(body: SmolBody, limits: checks.Limits) -> tuple[float, Optional[int], float]:
    """(temperature, top_k, top_p) of the request's decoding_strategy; without one, every field given applies."""
    temperature = checks.temperature(body.temperature, DEFAULT_TEMPERATURE)
    top_k, top_p = checks.top_k(body.top_k, limits), checks.top_p(body.top_p)
    strategy = body.decoding_strategy
    if strategy is None:
        return temperature, top_k, top_p
    if strategy == "greedy":
        return 0.0, None, 1.0
    if strategy == "sampling":
        return temperature, None, 1.0
    if strategy == "top_k":
        return temperature, top_k if body.top_k is not None else checks.top_k(STRATEGY_DEFAULTS["top_k"], limits), 1.0
    if strategy == "top_p":
        return temperature, None, top_p if body.top_p is not None else STRATEGY_DEFAULTS["top_p"]
    raise BadRequest("decoding_strategy", f"must be one of {', '.join(STRATEGIES)} or null, got {strategy!r}")


class Prompt:
    """The request's prompt text, the field it came in, and the turns a session keeps of it."""

    def __init__(self, body: SmolBody, history: list[Turn] | None):
        given = [f for f in ("text", "prompt", "messages") if getattr(body, f) is not None]
        if not given:
            raise BadRequest("text", "the request needs a prompt: text (or prompt) or messages")
        if len(given) > 1:
            raise BadRequest(given[1], f"give one of text, prompt or messages, not {' and '.join(given)}")
        self.field = given[0]
        if self.field == "messages":
            conversation = turns(body.messages or [])
            self.user = last_user(conversation) or ""
        else:
            self.user = body.text if body.text is not None else body.prompt or ""
            conversation = None if history is None else [("user", self.user)]
            if history is not None and not self.user:
                raise BadRequest(self.field, "must not be empty")
        if history is not None:
            conversation = history + (conversation or [])
        self.text = self.user if conversation is None else render(conversation)


def generation(service: "Service", body: SmolBody, history: list[Turn] | None) -> tuple[GenRequest, Prompt]:
    limits = service.limits
    if body.worker_rank not in (None, WORKER_RANK):
        raise BadRequest(
            "worker_rank",
            f"this server runs one pipeline (no data-parallel workers): the only "
            f"worker_rank is {WORKER_RANK} (GET /config: available_worker_ranks), got "
            f"{body.worker_rank}",
        )
    if body.session_id is not None:  # checked whether or not this endpoint uses memory
        chat_sessions.check_id(body.session_id)
    prompt = Prompt(body, history)
    ids = checks.prompt_ids(limits, prompt.text, prompt.field)
    temperature, top_k, top_p = decoding(body, limits)
    req = checks.generation(
        ids,
        checks.max_tokens(body.max_tokens, DEFAULT_MAX_TOKENS, limits),
        temperature,
        top_k,
        top_p,
        checks.seed(body.seed),
        checks.stops(body.stop),
    )
    return req, prompt


def session_of(body: SmolBody) -> Optional[str]:
    if body.session_id is None or body.use_memory is False:
        return None
    return chat_sessions.check_id(body.session_id)


def add(app: FastAPI, service: "Service") -> None:
    @app.post("/chat")
    async def chat(body: SmolBody, request: Request) -> StreamingResponse:
        session = session_of(body)
        owner = request.cookies.get(chat_sessions.OWNER_COOKIE) if session else None
        history = None if session is None else service.sessions.history(owner, session)
        req, prompt = generation(service, body, history)
        og = service.submit(req)
        if session and not owner:  # the caller's first session: from now on it is known by this token
            owner = chat_sessions.new_owner()

        async def stream() -> AsyncIterator[str]:
            async for event in service.events(og, request):
                if event.get("done"):
                    event = {**event, "worker_rank": WORKER_RANK, **({"session_id": session} if session else {})}
                    if session and "error" not in event:
                        service.sessions.add(owner, session, [("user", prompt.user), ("assistant", event["full_text"])])
                yield f"data: {json.dumps(event)}\n\n"

        response = StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)
        if owner:
            response.set_cookie(
                chat_sessions.OWNER_COOKIE,
                owner,
                max_age=chat_sessions.OWNER_COOKIE_MAX_AGE_S,
                httponly=True,
                samesite="strict",
            )
        return response

    @app.post("/query")
    async def query(body: SmolBody, request: Request) -> JSONResponse:
        req, _ = generation(service, body, None)
        final = await service.final(service.submit(req), request)
        text = final["full_text"]
        stats = {
            k: final[k]
            for k in (
                "total_time_ms",
                "time_to_first_token_ms",
                "tokens_per_second",
                "num_tokens",
                "prompt_tokens",
                "finish_reason",
                "context_restarts",
            )
        }
        return JSONResponse(
            {
                "generated_text": text,
                "success": True,
                "error": None,
                "worker_rank": WORKER_RANK,
                **stats,
                "response": text,
                "full_text": text,
            }
        )

    @app.get("/memory/status")
    async def memory_status() -> dict[str, Any]:
        s = service.sessions
        return {
            "enabled": True,
            "backend": "in_memory",
            "error": None,
            "sessions": s.count(),
            "max_sessions": s.max_sessions,
            "max_turns": s.max_turns,
        }

    @app.get("/memory/history")
    async def memory_history(
        request: Request, session_id: Annotated[str, Query()], limit: Annotated[int, Query(ge=1, le=10_000)] = 100
    ) -> dict[str, Any]:
        chat_sessions.check_id(session_id)
        turns_kept = service.sessions.history(request.cookies.get(chat_sessions.OWNER_COOKIE), session_id, limit)
        return {
            "enabled": True,
            "session_id": session_id,
            "messages": [{"role": r, "content": c} for r, c in turns_kept],
        }

    @app.post("/memory/clear")
    async def memory_clear(body: ClearBody, request: Request) -> dict[str, Any]:
        if not body.session_ids:
            raise BadRequest("session_ids", "must be a non-empty list")
        for i, s in enumerate(body.session_ids):
            chat_sessions.check_id(s, f"session_ids.{i}")
        owner = request.cookies.get(chat_sessions.OWNER_COOKIE)
        return {
            "ok": True,
            "deleted": service.sessions.clear(owner, body.session_ids),
            "sessions_requested": len(body.session_ids),
        }
