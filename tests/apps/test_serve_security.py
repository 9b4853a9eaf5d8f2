"""Who may talk to `python -m apps.serve` and what it tells them, against a real server (one rank, a
random GPT) started with an API key in PYCOMM_SERVE_API_KEY: the key as OpenAI's clients send it
(401 in OpenAI's shape without it, /health open), a session's memory readable only by the caller
that made it, no OpenAPI schema or docs, no absolute path or process id in /config, and Host
headers of other names refused on loopback (DNS rebinding)."""

from __future__ import annotations

import json
import os

import httpx
import openai
import pytest

from apps.serve.__main__ import API_KEY_ENV, parse_args
from apps.serve.chat_template import render
from tests.apps.serving import RANDOM_GPT, serving
from tests.launch import ROOT

pytestmark = pytest.mark.mpi
KEY = "sk-test-0123456789"
MODEL = "guarded"


@pytest.fixture(scope="module")
def server():
    before = os.environ.get(API_KEY_ENV)
    os.environ[API_KEY_ENV] = KEY  # as the docs advise: not on the command line, where `ps` shows it
    try:
        with serving("--nproc", "1", *RANDOM_GPT, "--model-name", MODEL) as s:
            yield s
    finally:
        if before is None:
            os.environ.pop(API_KEY_ENV)
        else:
            os.environ[API_KEY_ENV] = before


def keyed(server, **kw) -> httpx.Client:
    return server.client(headers={"Authorization": f"Bearer {KEY}"}, **kw)


def test_the_key_is_required_as_openai_clients_send_it(server) -> None:
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120) as good:
        done = good.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=3)
        assert len(done.choices[0].text) > 0
    for wrong in ("sk-wrong", KEY + "x", KEY[:-1]):
        with openai.OpenAI(base_url=server.url + "/v1", api_key=wrong, max_retries=0, timeout=120) as bad:
            with pytest.raises(openai.AuthenticationError) as e:
                bad.models.list()
            assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key", e.value.body
            assert e.value.body["type"] == "invalid_request_error", e.value.body
            assert "Authorization: Bearer" in e.value.body["message"], e.value.body
    with server.client() as anyone:
        health = anyone.get("/health")
        assert health.status_code == 200 and health.json()["healthy"], health.text  # open: for load balancers
        assert "pids" not in health.json(), health.text  # ... but no process ids
        for method, path in [
            ("GET", "/config"),
            ("GET", "/metrics"),
            ("POST", "/query"),
            ("GET", "/memory/status"),
            ("GET", "/v1/models"),
        ]:
            r = anyone.request(method, path, json={"text": "ROMEO:"} if method == "POST" else None)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (path, r.text)
        r = anyone.get("/config", headers={"Authorization": KEY})  # the key without the Bearer scheme
        assert r.status_code == 401 and r.json()["field"] == "authorization", r.text
    with keyed(server) as c:
        assert c.post("/query", json={"text": "ROMEO:", "max_tokens": 2}).status_code == 200
        assert c.get("/health").json()["pids"] == server.pids  # the launcher's caller, with the key


def test_the_key_option_and_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert parse_args([]).api_key is None and parse_args(["--api-key", "k1"]).api_key == "k1"
    monkeypatch.setenv(API_KEY_ENV, "k2")
    assert parse_args([]).api_key == "k2" and parse_args(["--api-key", "k1"]).api_key == "k1"
    with pytest.raises(SystemExit):
        parse_args(["--api-key", " "])


def test_a_session_is_readable_only_by_the_caller_that_made_it(server) -> None:
    """Two callers name the same session_id: each has its own; neither reads, extends or clears the other's."""
    sid = "shared-name"
    with keyed(server) as alice, keyed(server) as mallory:
        with alice.stream("POST", "/chat", json={"text": "ROMEO:", "max_tokens": 4, "session_id": sid}) as r:
            assert r.status_code == 200 and "httponly" in r.headers["set-cookie"].lower(), r.headers
            r.read()
        mine = alice.get("/memory/history", params={"session_id": sid}).json()["messages"]
        assert [m["role"] for m in mine] == ["user", "assistant"] and mine[0]["content"] == "ROMEO:", mine
        assert mallory.get("/memory/history", params={"session_id": sid}).json()["messages"] == []
        assert mallory.post("/memory/clear", json={"session_ids": [sid]}).json()["deleted"] == 0
        with mallory.stream("POST", "/chat", json={"text": "JULIET:", "max_tokens": 4, "session_id": sid}) as r:
            final = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")][-1]
        assert final["prompt_tokens"] == len(render([("user", "JULIET:")])), final  # none of alice's turns
        assert alice.get("/memory/history", params={"session_id": sid}).json()["messages"] == mine
        assert alice.post("/memory/clear", json={"session_ids": [sid]}).json()["deleted"] == 2


def test_no_schema_no_docs_and_config_without_paths_or_pids(server) -> None:
    with keyed(server) as c:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert c.get(path).status_code == 404, path
        config = c.get("/config").json()
    assert "pids" not in config and config["source"] == "random" and config["api_key_required"] is True, config
    assert str(ROOT) not in json.dumps(config) and "RANDOMLY INITIALISED" in " ".join(config["notes"]), config


@pytest.mark.parametrize(
    "host, status",
    [
        ("localhost", 200),
        ("localhost:{port}", 200),
        ("127.0.0.1:{port}", 200),
        ("[::1]:{port}", 200),
        ("[::1]", 200),
        ("LOCALHOST:{port}", 200),
        ("attacker.example:{port}", 400),
        ("attacker.example", 400),
        ("127.0.0.1.attacker.example", 400),
        ("localhost.attacker.example:{port}", 400),
        ("0.0.0.0:{port}", 400),
    ],
)
def test_on_loopback_only_loopback_names_are_answered(server, host: str, status: int) -> None:
    port = server.url.rsplit(":", 1)[1]
    with keyed(server) as c:
        r = c.get("/v1/models", headers={"Host": host.format(port=port)})
    assert r.status_code == status, r.text
    if status == 400:
        assert r.json()["error"]["param"] == "host" and "DNS rebinding" in r.json()["error"]["message"], r.text
