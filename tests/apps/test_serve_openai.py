"""The OpenAI-compatible /v1 of `python -m apps.serve --nproc 2` (a random GPT with a 32-token
context, float64), spoken to by the official `openai` client and by curl: models, completions and
chat completions, whole and streamed (chunks, usage, [DONE]), stop strings, seeds, generation past
the context, `n` independent samples, a client that leaves a whole answer, and errors in OpenAI's
shape raised by the client as its own exception types (also for a body that is not JSON as sent)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import httpx
import openai  # a test dependency (scripts/requirements-test.txt)
import pytest

from apps.serve.request_checks import MAX_N
from tests.apps.serving import RANDOM_GPT, serving

pytestmark = pytest.mark.mpi
MODEL = "tiny-random"
ENDLESS = 2**20  # --max-tokens-limit: a request for this many tokens runs for many minutes


@pytest.fixture(scope="module")
def server():
    with serving(
        "--nproc", "2", *RANDOM_GPT, "--dtype", "float64", "--model-name", MODEL, "--max-tokens-limit", str(ENDLESS)
    ) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def greedy(server, prompt: str, n: int) -> str:
    """The same engine's greedy answer through SmolCluster's /query."""
    with server.client() as c:
        r = c.post("/query", json={"text": prompt, "max_tokens": n, "decoding_strategy": "greedy"})
    assert r.status_code == 200, r.text
    return r.json()["generated_text"]


def test_models_and_whole_completions(server, client) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL] and client.models.retrieve(MODEL).id == MODEL
    done = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=20, temperature=0)
    assert done.object == "text_completion" and done.model == MODEL and len(done.choices) == 1
    assert done.choices[0].finish_reason == "length" and done.choices[0].text == greedy(server, "ROMEO:", 20)
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (6, 20, 26)
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=12, temperature=0
    )
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == greedy(server, "USER:\nHi\n\nASSISTANT:\n", 12)  # the chat template
    assert chat.usage.prompt_tokens == len("USER:\nHi\n\nASSISTANT:\n") and chat.usage.completion_tokens == 12


def test_streams_equal_whole_answers_past_the_context_with_usage_last(server, client) -> None:
    n = 90  # ~3x the 32-token context
    whole = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=n, temperature=0.9, seed=7)
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="ROMEO:",
            max_tokens=n,
            temperature=0.9,
            seed=7,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len(texts) > 10 and "".join(texts) == whole.choices[0].text  # streamed, token by token
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == n  # usage: its own last chunk
    assert all(c.usage is None for c in chunks[:-1])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who art thou?"}]
    whole_chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=n, seed=3)
    parts = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=n, seed=3, stream=True))
    assert parts[0].choices[0].delta.role == "assistant" and parts[-1].choices[0].finish_reason == "length"
    assert "".join(p.choices[0].delta.content or "" for p in parts) == whole_chat.choices[0].message.content


def test_stop_strings_end_the_answer_before_them(server, client) -> None:
    text = greedy(server, "ROMEO:", 60)
    stop = text[25:27]  # a string the greedy answer reaches: it ends where its first occurrence starts
    done = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=60, temperature=0, stop=[stop, "\x00"])
    assert done.choices[0].finish_reason == "stop" and done.choices[0].text == text[: text.index(stop)]
    streamed = client.completions.create(
        model=MODEL, prompt="ROMEO:", max_tokens=60, temperature=0, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == text[: text.index(stop)]


@pytest.mark.parametrize(
    "kwargs, error, param",
    [
        ({"model": "gpt-4"}, "NotFoundError", "model"),
        ({"n": 0}, "BadRequestError", "n"),
        ({"n": MAX_N + 1}, "BadRequestError", "n"),
        ({"temperature": -1}, "BadRequestError", "temperature"),
        ({"max_tokens": 0}, "BadRequestError", "max_tokens"),
        ({"top_p": 2.0}, "BadRequestError", "top_p"),
        ({"presence_penalty": 0.5}, "BadRequestError", "presence_penalty"),
        ({"prompt": "ROMEO\u20ac"}, "BadRequestError", "prompt"),
        ({"prompt": ["a", "b"]}, "BadRequestError", "prompt"),
        ({"stream_options": {"include_usage": True}}, "BadRequestError", "stream_options"),
    ],
)
def test_errors_are_openai_errors(client, kwargs: dict, error: str, param: str) -> None:
    with pytest.raises(getattr(openai, error)) as e:
        client.completions.create(**{"model": MODEL, "prompt": "ROMEO:", "max_tokens": 4, **kwargs})
    body = e.value.body
    assert body["param"] == param and param in body["message"] and body["type"] == "invalid_request_error", body
    assert e.value.status_code in (400, 404)


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_streams_sse_chunks_ending_with_done(server) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    out = subprocess.run(
        [
            "curl",
            "-sN",
            "--max-time",
            "120",
            server.url + "/v1/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(body),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    lines = [line for line in out.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]", out
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and chunks[-1]["usage"]["completion_tokens"] == 10
    whole = subprocess.run(
        [
            "curl",
            "-s",
            "--max-time",
            "120",
            server.url + "/v1/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps({"model": MODEL, "prompt": "Hi"}),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    assert json.loads(whole)["usage"]["completion_tokens"] == 16  # OpenAI's default max_tokens


def test_n_serves_independent_samples_counted_in_usage(client) -> None:
    """n=3 with a seed: the samples of seeds seed, seed+1, seed+2 (each the answer of n=1 with that seed),
    whole and streamed, the completion tokens of all three in usage; the prompt counted once."""
    kw = {"model": MODEL, "prompt": "ROMEO:", "max_tokens": 12, "temperature": 1.0}
    three = client.completions.create(n=3, seed=11, **kw)
    alone = [client.completions.create(seed=11 + i, **kw).choices[0].text for i in range(3)]
    assert [c.index for c in three.choices] == [0, 1, 2] and [c.text for c in three.choices] == alone
    assert len(set(alone)) == 3, alone  # independent samples, not one answer three times
    assert (three.usage.prompt_tokens, three.usage.completion_tokens) == (6, 36)
    chunks = list(client.completions.create(n=3, seed=11, stream=True, stream_options={"include_usage": True}, **kw))
    streamed = ["".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i) for i in range(3)]
    assert streamed == alone and chunks[-1].usage.completion_tokens == 36
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, n=2, seed=4
    )
    assert [c.index for c in chat.choices] == [0, 1] and chat.usage.completion_tokens == 10
    assert all(c.message.role == "assistant" and len(c.message.content) > 0 for c in chat.choices)


def metrics(server) -> dict:
    with server.client() as c:
        return c.get("/metrics").json()


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", {"model": MODEL, "prompt": "ROMEO:", "max_tokens": ENDLESS, "n": 2}),
        ("/query", {"text": "ROMEO:", "max_tokens": ENDLESS}),
    ],
)
def test_a_client_that_leaves_a_whole_answer_frees_its_slots(server, path: str, body: dict) -> None:
    """A real client waits for a whole (not streamed) answer that would take many minutes, then gives up
    and closes its connection: the server cancels the generation(s) and frees the slots, counted as
    cancelled, not completed."""
    before = metrics(server)
    with httpx.Client(base_url=server.url) as c, pytest.raises(httpx.ReadTimeout):
        c.post(path, json=body, timeout=httpx.Timeout(120, read=3))  # gives up after 3 s without an answer
    samples = body.get("n", 1)
    deadline = time.monotonic() + 120
    while (now := metrics(server))["cancelled"] < before["cancelled"] + samples and time.monotonic() < deadline:
        time.sleep(0.5)
    assert now["cancelled"] == before["cancelled"] + samples and now["completed"] == before["completed"], now
    assert now["active"] == 0 and now["queue_depth"] == 0, now


@pytest.mark.parametrize("path", ["/v1/completions", "/query"])
@pytest.mark.parametrize(
    "headers, says",
    [
        ({"Content-Type": "text/plain"}, "Content-Type must be application/json, got text/plain"),
        ({}, "Content-Type must be application/json, got no Content-Type header"),
    ],
)
def test_a_json_body_under_another_content_type_is_told_so(server, path: str, headers: dict, says: str) -> None:
    body = json.dumps({"model": MODEL, "prompt": "ROMEO:", "text": "ROMEO:", "max_tokens": 2}).encode()
    with server.client() as c:
        r = c.post(path, content=body, headers=headers)
    assert r.status_code == 415 and says in r.text, r.text
    error = r.json()["error"]
    assert (error["param"] if path.startswith("/v1") else r.json()["field"]) == "body", r.text


@pytest.mark.parametrize("path", ["/v1/completions", "/query"])
def test_a_huge_integer_is_named_with_its_digits_and_the_limit(server, path: str) -> None:
    body = '{"model": "%s", "prompt": "ROMEO:", "text": "ROMEO:", "max_tokens": %s}' % (MODEL, "7" * 5000)
    with server.client() as c:
        r = c.post(path, content=body, headers={"Content-Type": "application/json"})
    limit = sys.get_int_max_str_digits()
    assert r.status_code == 400 and f"integer with 5000 digits exceeds the limit of {limit} digits" in r.text, r.text
