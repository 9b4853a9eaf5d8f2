"""No request can bring `python -m apps.serve --nproc 2` down: a property-based fuzz test (hypothesis)
sends generated bodies (every field of both APIs at extreme and wrongly typed values, unknown fields,
bytes that are not JSON or not UTF-8) to a running 2-stage server and asserts that every answer is
2xx/4xx in the API's own error shape, that a stream that started ends cleanly, and that /health still
answers; then the framework's own errors (404, 405, 413 before the body is read) in the same shapes.
The last test kills a rank while streams are open: each gets a final error event (the module's
server ends there)."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings  # test dependencies (scripts/requirements-test.txt)
from hypothesis import strategies as st

from tests.apps.serving import RANDOM_GPT, alive, serving, sse_events

pytestmark = pytest.mark.mpi
MODEL = "fuzzed"
MAX_TOKENS, MAX_BODY = 48, 32768
FUZZ_EXAMPLES, FUZZ_BUDGET_S = 150, 60.0  # whichever ends first: CI time stays bounded
VOCAB = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def server():
    with serving(
        "--nproc",
        "2",
        *RANDOM_GPT,
        "--model-name",
        MODEL,
        "--slots",
        "4",
        "--max-tokens-limit",
        str(MAX_TOKENS),
        "--max-body-bytes",
        str(MAX_BODY),
    ) as s:
        yield s


# ---- generated requests: a valid base per endpoint, fields overlaid (mostly in range, some wrong) --
big_ints = st.one_of(
    st.integers(-3, 70), st.integers(-(2**70), 2**70), st.sampled_from([2**31, 2**63 - 1, 2**63, -(2**63) - 1])
)
odd_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1e-5, 1e-3, 1.0, 2.0, 100.0, 1e308]),
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    big_ints,
    odd_floats,
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
prompt_text = st.one_of(st.text(alphabet=VOCAB, min_size=1, max_size=120), st.text(max_size=20))
message = st.fixed_dictionaries(
    {
        "role": st.one_of(st.sampled_from(["system", "user", "assistant", "tool"]), junk),
        "content": st.one_of(
            prompt_text,
            junk,
            st.lists(
                st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": prompt_text}), max_size=2
            ),
        ),
    }
)


def mostly(valid: Any, wrong: Any = junk) -> Any:
    return st.one_of(valid, valid, valid, wrong)


FIELDS: dict[str, Any] = {
    "max_tokens": mostly(st.integers(1, MAX_TOKENS), st.one_of(big_ints, junk)),
    "temperature": mostly(st.one_of(st.floats(0, 2), st.sampled_from([5e-324, 1e-300, 1e-5, 100.0])), odd_floats),
    "top_p": mostly(st.one_of(st.floats(5e-324, 1.0), st.just(1.0)), odd_floats),
    "top_k": mostly(st.one_of(st.integers(1, 80), st.just(2**63 - 1)), big_ints),
    "seed": mostly(st.integers(-(2**63), 2**63 - 1), big_ints),
    "decoding_strategy": mostly(st.sampled_from(["greedy", "sampling", "top_p", "top_k"])),
    "stop": mostly(st.one_of(st.text(alphabet=VOCAB, max_size=3), st.lists(st.text(max_size=3), max_size=6))),
    "worker_rank": mostly(st.just(0), st.one_of(st.just(1), junk)),
    "session_id": mostly(st.text(max_size=140)),
    "use_memory": mostly(st.booleans()),
    "stream": mostly(st.booleans()),
    "stream_options": mostly(st.fixed_dictionaries({"include_usage": st.booleans()})),
    "n": mostly(st.just(1), st.one_of(st.just(2), junk)),
    "echo": junk,
    "logprobs": junk,
    "presence_penalty": odd_floats,
    "model": mostly(st.just(MODEL)),
    "text": junk,
    "prompt": st.one_of(st.lists(prompt_text, max_size=2), junk),
    "messages": st.one_of(st.lists(message, max_size=3), junk),
}
BASES = {
    "/chat": st.one_of(
        st.fixed_dictionaries({"text": prompt_text}),
        st.fixed_dictionaries({"messages": st.lists(message, min_size=1, max_size=3)}),
    ),
    "/query": st.fixed_dictionaries({"text": prompt_text}),
    "/v1/completions": st.fixed_dictionaries({"model": st.just(MODEL), "prompt": prompt_text}),
    "/v1/chat/completions": st.fixed_dictionaries(
        {"model": st.just(MODEL), "messages": st.lists(message, min_size=1, max_size=3)}
    ),
    "/memory/clear": st.fixed_dictionaries({"session_ids": st.lists(st.text(max_size=10), max_size=3)}),
}
raw = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [b"\xff\xfe{}", b'{"text": "\xc3"}', b"[]", b'"x"', b"{", b'{"text": NaN}', b'{"max_tokens": 1e999}']
    ),
)


def requests_for(path: str) -> Any:
    overlay = st.fixed_dictionaries({}, optional=FIELDS)  # a random subset of fields
    extra = st.dictionaries(st.text(max_size=6), junk, max_size=2)  # unknown fields
    bodies = st.tuples(BASES[path], overlay, extra).map(lambda t: {**t[2], **t[0], **t[1]})
    return st.tuples(st.just(path), st.one_of(bodies, bodies, bodies, bodies, raw))


requests = st.sampled_from(list(BASES)).flatmap(requests_for)


def check_answer(response: httpx.Response, path: str) -> None:
    """2xx/4xx; errors in the API's shape; a started stream ends with its final event, without an error."""
    status = response.status_code
    assert 200 <= status < 500, (status, response.read())
    kind = response.headers.get("content-type", "")
    if status >= 400:
        body = json.loads(response.read())
        if path.startswith("/v1/"):
            assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"]), body
        else:
            assert set(body) == {"error", "field"} and isinstance(body["error"], str), body
    elif kind.startswith("text/event-stream"):
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
        if path.startswith("/v1/"):
            assert lines[-1] == "data: [DONE]" and not any('"error"' in line for line in lines[:-1]), lines[-3:]
        else:
            last = json.loads(lines[-1][5:])
            assert last["done"] is True and "error" not in last, last
    else:
        json.loads(response.read())


def test_fuzzed_requests_never_bring_the_server_down(server) -> None:
    deadline = time.monotonic() + FUZZ_BUDGET_S
    sent = [0]
    with server.client(timeout=120) as c:

        @settings(
            max_examples=FUZZ_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=requests)
        def one(request: tuple[str, Any]) -> None:
            path, body = request
            if time.monotonic() > deadline:
                return
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            with c.stream("POST", path, content=content, headers={"Content-Type": "application/json"}) as r:
                check_answer(r, path)
            sent[0] += 1
            assert c.get("/health").status_code == 200

        one()
        m = c.get("/metrics").json()
    assert sent[0] >= 30, f"only {sent[0]} requests in {FUZZ_BUDGET_S} s"
    assert m["completed"] > 0, m  # some generated bodies were valid and were answered
    print(f"fuzz: {sent[0]} requests, {m['completed']} generations completed")


@pytest.mark.parametrize(
    "method, path, status, openai_shape",
    [
        ("GET", "/nope", 404, False),
        ("GET", "/v1/nope", 404, True),
        ("GET", "/chat", 405, False),
        ("PUT", "/v1/completions", 405, True),
        ("DELETE", "/health", 405, False),
    ],
)
def test_framework_errors_answer_in_the_apis_shape(
    server, method: str, path: str, status: int, openai_shape: bool
) -> None:
    with server.client() as c:
        r = c.request(method, path)
    assert r.status_code == status and r.headers["content-type"].startswith("application/json"), r.text
    body = r.json()
    message = body["error"]["message"] if openai_shape else body["error"]
    assert path in message and (status != 405 or "POST" in message or "GET" in message), body
    assert ("field" not in body) == openai_shape


@pytest.mark.parametrize("path", ["/chat", "/v1/completions"])
def test_a_body_over_the_limit_gets_413_before_it_is_read(server, path: str) -> None:
    """The request announces 100 MB and sends none of it: the answer comes anyway (nothing is read)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {100 * 2**20}\r\n\r\n".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer
    error = json.loads(body)["error"]
    assert str(MAX_BODY) in (error["message"] if path.startswith("/v1/") else error), body
    with server.client() as c:  # sent in chunks without a length: refused once it passes the limit
        r = c.post(
            path,
            content=(b"x" * 4096 for _ in range(4 * MAX_BODY // 4096)),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 413 and str(MAX_BODY) in r.text, r.text
        assert c.get("/health").status_code == 200


def test_a_dead_rank_ends_every_open_stream_with_an_error_event(server) -> None:
    """Runs last: rank 1 is frozen (SIGSTOP), then a SmolCluster stream, an OpenAI stream and a /query are
    opened (their generations cannot finish), then rank 1 is killed (SIGKILL): each gets its final error
    event, the /query a 503."""
    got: dict[str, Any] = {}
    opened = threading.Barrier(2 + 1)  # both streams have their 200 and headers

    def smol() -> None:
        with server.client() as c, c.stream("POST", "/chat", json={"text": "ROMEO:", "max_tokens": MAX_TOKENS}) as r:
            assert r.status_code == 200
            opened.wait()
            got["chat"] = [event for _, event in sse_events(r)]

    def oai() -> None:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120) as client:
            stream = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=MAX_TOKENS, stream=True)
            opened.wait()
            try:
                got["openai"] = f"finished without an error: {''.join(c.choices[0].text for c in stream)!r}"
            except openai.APIError as e:
                got["openai"] = e

    def query() -> None:
        with server.client() as c:
            got["query"] = c.post("/query", json={"text": "ROMEO:", "max_tokens": MAX_TOKENS})

    os.kill(server.pids[1], signal.SIGSTOP)  # the pipeline stalls: nothing can finish from here on
    try:
        threads = [threading.Thread(target=f) for f in (smol, oai, query)]
        for t in threads:
            t.start()
        opened.wait(timeout=120)
        with server.client() as c:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # all three in: active or waiting, the engine stuck on rank 1
                m = c.get("/metrics").json()
                if m["active"] + m["queue_depth"] == 3:
                    break
                time.sleep(0.1)
        assert m["active"] + m["queue_depth"] == 3, m
    finally:
        os.kill(server.pids[1], signal.SIGKILL)
    for t in threads:
        t.join(timeout=120)
    ended = ("stopping", "pipeline failed")  # SIGTERM from Open MPI, or the engine saw the failure first
    last = got["chat"][-1]
    assert last["done"] is True and any(w in last["error"] for w in ended), got["chat"][-3:]
    assert isinstance(got["openai"], openai.APIError) and any(w in str(got["openai"]) for w in ended), got["openai"]
    q = got["query"]
    assert q.status_code == 503 and any(w in q.json()["error"] for w in ended), q.text
    assert server.proc.wait(timeout=60) != 0  # the job ends: Open MPI stops it when a rank dies
    deadline = time.monotonic() + 30
    while any(alive(p) for p in server.pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in server.pids if alive(p)], server.output()
