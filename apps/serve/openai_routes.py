"""The OpenAI-compatible API, as vLLM, llama.cpp's server and TGI serve it: GET /v1/models (and
/v1/models/{id}), POST /v1/completions and POST /v1/chat/completions, whole or streamed (`stream`:
Server-Sent Events of OpenAI's chunks, then `data: [DONE]`; `stream_options.include_usage` adds a
last chunk with `usage` and no choices). Fields: `model` (the served id, else 404), `prompt` /
`messages` (apps.serve.chat_template), `max_tokens` (`max_completion_tokens`), `temperature`,
`top_p`, `top_k` (vLLM's extension), `n` (independent samples, as vLLM: seeds seed, seed+1, ...;
at most request_checks.MAX_N), `stop`, `seed`, `user`. Fields this server cannot
honour are accepted only at their no-op value (`echo: false`, `best_of: 1`, penalties 0, ...), so no
answer silently ignores what was asked. Errors: OpenAI's shape (apps.serve.http_errors); an error
after a stream started is a last `data: {"error": {...}}` chunk before `data: [DONE]`."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

from apps.serve import request_checks as checks
from apps.serve.chat_template import Message, render, turns
from apps.serve.http_errors import BadRequest, openai_error_body
from apps.serve.request_checks import JsonFloat
from apps.serve.smolcluster_routes import SSE_HEADERS

if TYPE_CHECKING:  # apps.serve.api imports this module
    from apps.serve.api import Service

COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
CHAT_MAX_TOKENS = 200
DEFAULT_TEMPERATURE = 1.0  # OpenAI's default
OWNER = "pycomm"


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: Optional[StrictBool] = None


class Sampling(BaseModel):
    """What both endpoints take."""

    model_config = ConfigDict(extra="ignore")
    model: StrictStr
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[JsonFloat] = None
    top_p: Optional[JsonFloat] = None
    top_k: Optional[StrictInt] = None
    n: Optional[StrictInt] = None
    stop: Union[StrictStr, list[StrictStr], None] = None
    seed: Optional[StrictInt] = None
    stream: Optional[StrictBool] = None
    stream_options: Optional[StreamOptions] = None
    user: Optional[StrictStr] = None
    frequency_penalty: Optional[JsonFloat] = None
    presence_penalty: Optional[JsonFloat] = None
    logit_bias: Optional[dict[str, JsonFloat]] = None


class CompletionBody(Sampling):
    prompt: Union[StrictStr, list[StrictStr]]
    echo: Optional[StrictBool] = None
    best_of: Optional[StrictInt] = None
    logprobs: Optional[StrictInt] = None
    suffix: Optional[StrictStr] = None


class ChatBody(Sampling):
    messages: list[Message]
    max_completion_tokens: Optional[StrictInt] = None
    logprobs: Optional[StrictBool] = None
    top_logprobs: Optional[StrictInt] = None
    tools: Optional[list[Any]] = None


# field -> the values that ask for nothing this server does not do
NO_OP = {
    "frequency_penalty": (0.0,),
    "presence_penalty": (0.0,),
    "logit_bias": ({},),
    "echo": (False,),
    "best_of": (1,),
    "logprobs": (False,),
    "suffix": ("",),
    "top_logprobs": (0,),
    "tools": ([],),
}


def refuse_unsupported(body: BaseModel) -> None:
    for name, fine in NO_OP.items():
        value = getattr(body, name, None)
        if value is not None and value not in fine:
            raise BadRequest(
                name,
                f"{value!r} is not supported by this server (it serves no penalties, "
                f"logprobs, echo, suffix or tools); leave it out or use {fine[0]!r}",
            )


class Openai:
    """One /v1 request: checks, the generation, and the answer in OpenAI's format."""

    def __init__(
        self, service: "Service", body: Sampling, chat: bool, prompt: str, prompt_field: str, max_tokens: int | None
    ):
        if body.model != service.model_id:
            raise BadRequest(
                "model",
                f"the model {body.model!r} does not exist; this server serves {service.model_id!r} (GET /v1/models)",
                status=404,
                code="model_not_found",
            )
        refuse_unsupported(body)
        if body.stream_options is not None and not body.stream:
            raise BadRequest("stream_options", "is only allowed with stream: true")
        limits = service.limits
        ids = checks.prompt_ids(limits, prompt, prompt_field)
        default = CHAT_MAX_TOKENS if chat else COMPLETION_MAX_TOKENS
        field = "max_completion_tokens" if chat and body.max_tokens is None and max_tokens is not None else "max_tokens"
        self.request = checks.generation(
            ids,
            checks.max_tokens(max_tokens, default, limits, field),
            checks.temperature(body.temperature, DEFAULT_TEMPERATURE),
            checks.top_k(body.top_k, limits),
            checks.top_p(body.top_p),
            checks.seed(body.seed),
            checks.stops(body.stop),
        )
        self.n = checks.samples(body.n)
        self.service, self.body, self.chat = service, body, chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.chunk_object = "chat.completion.chunk" if chat else "text_completion"

    def usage(self, finals: list[dict[str, Any]]) -> dict[str, int]:
        """The prompt once (as vLLM and OpenAI count it), the tokens of every sample."""
        prompt, completion = len(self.request.prompt_ids), sum(f.get("num_tokens", 0) for f in finals)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.body.model, "choices": choices}

    def whole(self, finals: list[dict[str, Any]]) -> dict[str, Any]:
        choices = []
        for i, final in enumerate(finals):
            reason, text = final["finish_reason"], final["full_text"]
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": reason,
                }
                if self.chat
                else {"index": i, "text": text, "logprobs": None, "finish_reason": reason}
            )
        return {**self._envelope(self.object, choices), "usage": self.usage(finals)}

    def chunk(self, index: int, text: str | None, reason: str | None = None, role: bool = False) -> dict[str, Any]:
        if self.chat:
            delta = {} if text is None else {"content": text}
            if role:
                delta = {"role": "assistant", **delta}
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": reason}
        out = self._envelope(self.chunk_object, [choice])
        if self.include_usage:
            out["usage"] = None  # as OpenAI: every chunk has the key, only the last one a value
        return out

    @property
    def include_usage(self) -> bool:
        return bool(self.body.stream_options and self.body.stream_options.include_usage)

    async def answer(self, request: Request) -> Any:
        ogs = self.service.submit_many(self.request, self.n)
        if not self.body.stream:
            return JSONResponse(self.whole(await self.service.finals(ogs, request)))

        async def stream() -> AsyncIterator[str]:
            def sse(obj: Any) -> str:
                return f"data: {json.dumps(obj)}\n\n"

            if self.chat:
                for i in range(self.n):
                    yield sse(self.chunk(i, "", role=True))
            finals = []
            async for i, event in self.service.merged(ogs, request):
                if "error" in event:
                    yield sse(openai_error_body(503, event["error"]))
                    break
                if not event["done"]:
                    yield sse(self.chunk(i, event["token"]))
                    continue
                finals.append(event)
                yield sse(self.chunk(i, None if self.chat else "", event["finish_reason"]))
            else:
                if self.include_usage:
                    yield sse({**self._envelope(self.chunk_object, []), "usage": self.usage(finals)})
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)


def add(app: FastAPI, service: "Service") -> None:
    def model_card() -> dict[str, Any]:
        return {
            "id": service.model_id,
            "object": "model",
            "created": service.info["created"],
            "owned_by": OWNER,
            "max_model_len": service.limits.block_size,
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id}")
    async def model(model_id: str) -> dict[str, Any]:
        if model_id != service.model_id:
            raise BadRequest(
                "model",
                f"the model {model_id!r} does not exist; this server serves {service.model_id!r}",
                status=404,
                code="model_not_found",
            )
        return model_card()

    @app.post("/v1/completions")
    async def completions(body: CompletionBody, request: Request) -> Any:
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if len(prompts) != 1:
            raise BadRequest("prompt", f"one prompt per request (a string or a list of one), got {len(prompts)}")
        return await Openai(service, body, False, prompts[0], "prompt", body.max_tokens).answer(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody, request: Request) -> Any:
        prompt = render(turns(body.messages))
        n = body.max_completion_tokens if body.max_tokens is None else body.max_tokens
        return await Openai(service, body, True, prompt, "messages", n).answer(request)
