"""`python -m apps.serve --nproc 2` for real: a tiny GPT trained by apps.train (in another directory,
with a relative data.path), served in 2 pipeline stages on 2 ranks in float64, spoken to over HTTP
as SmolCluster's clients speak (its docs' request bodies, sessions, decoding strategies), streaming,
concurrency, disconnects, bad requests, and generation past the context against a single-process
float64 reference that applies the same window rule."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
import yaml

from apps.models.gpt import GPT
from tests.apps.serving import serving, sse_events, train_tiny_gpt

pytestmark = pytest.mark.mpi

SLOTS, QUEUE = 4, 12  # 16 clients: 4 generating, 12 waiting
BLOCK, KEEP = 64, 32  # the trained model's context (tests/apps/serving.py TINY_GPT) and the default window keep


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = train_tiny_gpt(tmp_path_factory.mktemp("serve"))
    data_path = yaml.safe_load((run / "config.yaml").read_text())["data"]["path"]
    assert data_path == "text.txt" and not Path(data_path).exists()  # served from here, it names no file
    return run


@pytest.fixture(scope="module")
def server(run_dir: Path):
    with serving(
        "--nproc", "2", "--checkpoint", str(run_dir), "--slots", str(SLOTS), "--queue", str(QUEUE), "--dtype", "float64"
    ) as s:
        yield s


def reference_model(run_dir: Path) -> tuple[GPT, str]:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    vocab = "".join(sorted(set((run_dir.parent.parent / "text.txt").read_text())))
    newest = sorted((run_dir / "checkpoints").glob("ckpt.*step*"))[-1]
    opts = cfg["model"]["options"]
    model = GPT(len(vocab), cfg["data"]["options"]["block_size"], opts["n_layer"], opts["n_head"], opts["n_embd"], 0.0)
    model.load_state_dict(torch.load(newest / "model_state_dict.pt", weights_only=True))
    return model.double().eval(), vocab


def reference_greedy(run_dir: Path, prompt: str, n: int) -> str:
    """Greedy generation on one process in float64 with the plain full forward (no cache, no pipeline)
    over the window the documented rule gives: when the context would pass the block size, it
    restarts from its last KEEP tokens."""
    model, vocab = reference_model(run_dir)
    seq, start = [vocab.index(c) for c in prompt], 0
    with torch.no_grad():
        for _ in range(n):
            if len(seq) - start > BLOCK:
                start = len(seq) - KEEP
            seq.append(int(model(torch.tensor([seq[start:]]))[0, -1].argmax()))
    return "".join(vocab[i] for i in seq[len(prompt) :])


def chat(client: httpx.Client, body: dict) -> list[tuple[float, dict]]:
    with client.stream("POST", "/chat", json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(r))


def metrics_settle(client: httpx.Client, timeout: float = 60) -> dict:
    """/metrics once no request is active or waiting (or the last one seen, at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        m = client.get("/metrics").json()
        if (m["active"] == 0 and m["queue_depth"] == 0) or time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def test_stream_is_incremental_and_equals_single_process_greedy(server, run_dir: Path) -> None:
    prompt, n = "to be or", 24
    with server.client() as c:
        events = chat(c, {"prompt": prompt, "max_tokens": n, "temperature": 0, "seed": 1})
    tokens = [e for _, e in events if not e["done"]]
    final = events[-1][1]
    assert len(tokens) >= 5 and all(e["done"] is False and isinstance(e["token"], str) for e in tokens), events
    assert [e["done"] for _, e in events].count(True) == 1 and final["done"] is True, events
    assert final["num_tokens"] == n and "".join(e["token"] for e in tokens) == final["full_text"]
    for key in ("time_to_first_token_ms", "tokens_per_second", "total_time_ms"):
        assert final[key] > 0, final
    assert final["time_to_first_token_ms"] <= final["total_time_ms"]
    assert final["full_text"] == reference_greedy(run_dir, prompt, n)


def test_smolcluster_query_answers_in_its_fields(server, run_dir: Path) -> None:
    """Its docs' MP query, greedy: SmolCluster's response fields (ours kept beside them)."""
    with server.client() as c:
        r = c.post(
            "/query",
            json={
                "text": "whether",
                "max_tokens": 10,
                "decoding_strategy": "greedy",
                "worker_rank": 0,
                "use_hf_defaults": True,
            },
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["error"] is None and body["worker_rank"] == 0, body
    assert body["num_tokens"] == 10 and body["generated_text"] == reference_greedy(run_dir, "whether", 10)
    assert body["response"] == body["full_text"] == body["generated_text"] and body["finish_reason"] == "length"
    for key in ("total_time_ms", "time_to_first_token_ms", "tokens_per_second"):
        assert body[key] > 0, body


def test_generation_past_the_context_equals_the_float64_window_reference(server, run_dir: Path) -> None:
    """Two concurrent streams, 2.5x the block size each, one with a prompt longer than the context:
    the window moved (context_restarts) and every token equals the single-process reference's."""
    prompts = ["to be or not", "whether tis nobler in mind " * 3]
    n = BLOCK * 5 // 2
    finals: list[dict | None] = [None, None]

    def client(i: int) -> None:
        with server.client() as c:
            finals[i] = chat(c, {"text": prompts[i], "max_tokens": n, "decoding_strategy": "greedy"})[-1][1]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for prompt, final in zip(prompts, finals):
        assert final is not None and "error" not in final and final["num_tokens"] == n, final
        assert final["context_restarts"] >= 2, final
        assert final["full_text"] == reference_greedy(run_dir, prompt, n)


@pytest.mark.parametrize(
    "body",
    [
        {"decoding_strategy": "greedy", "temperature": 7.5},  # greedy ignores the temperature
        {"decoding_strategy": "top_k", "top_k": 1, "temperature": 2.0},  # top-1 is greedy
        {"decoding_strategy": "top_p", "top_p": 1e-300, "temperature": 2.0},  # so is the smallest nucleus
        {"temperature": 1e-300, "top_k": 2**63, "seed": -(2**63)},  # extreme values: safe, and greedy
    ],
)
def test_decoding_fields_reach_the_last_stage(server, run_dir: Path, body: dict) -> None:
    with server.client() as c:
        r = c.post("/query", json={"text": "to be", "max_tokens": 12, **body})
    assert r.status_code == 200, r.text
    assert r.json()["generated_text"] == reference_greedy(run_dir, "to be", 12)


def test_smolcluster_sessions_keep_the_conversation(server) -> None:
    """Its docs' instruction-format stream with a session: the second turn is answered with the first as
    context (chat template), /memory/history returns the turns, /memory/clear forgets them, /query and
    requests without session_id never touch memory."""
    sid = "mp-session-1"
    first = {
        "messages": [{"role": "system", "content": "be mind"}, {"role": "user", "content": "to be"}],
        "max_tokens": 8,
        "decoding_strategy": "top_p",
        "top_p": 0.9,
        "temperature": 0.7,
        "session_id": sid,
        "use_memory": True,
    }
    with server.client() as c:
        one = chat(c, first)[-1][1]
        two = chat(
            c,
            {
                "text": "or not",
                "max_tokens": 8,
                "decoding_strategy": "top_k",
                "top_k": 40,
                "session_id": sid,
                "use_memory": True,
            },
        )[-1][1]
        alone = chat(c, {"text": "or not", "max_tokens": 8})[-1][1]
        c.post("/query", json={"text": "or not", "max_tokens": 4, "session_id": sid})
        history = c.get("/memory/history", params={"session_id": sid}).json()
        cleared = c.post("/memory/clear", json={"session_ids": [sid]}).json()
        after = c.get("/memory/history", params={"session_id": sid}).json()
    assert one["session_id"] == sid and one["worker_rank"] == 0 and "error" not in one, one
    template = "SYSTEM:\nbe mind\n\nUSER:\nto be\n\nASSISTANT:\n"
    assert one["prompt_tokens"] == len(template)
    second = f"USER:\nto be\n\nASSISTANT:\n{one['full_text']}\n\nUSER:\nor not\n\nASSISTANT:\n"
    assert two["prompt_tokens"] == len(second) and alone["prompt_tokens"] == len("or not"), (two, alone)
    assert history["messages"] == [
        {"role": "user", "content": "to be"},
        {"role": "assistant", "content": one["full_text"]},
        {"role": "user", "content": "or not"},
        {"role": "assistant", "content": two["full_text"]},
    ], history
    assert cleared == {"ok": True, "deleted": 4, "sessions_requested": 1} and after["messages"] == []


def test_sixteen_concurrent_clients_all_finish_and_seeds_do_not_depend_on_batching(server) -> None:
    bodies = [{"prompt": "the ", "max_tokens": 30, "temperature": 1.0, "top_k": 5, "seed": i} for i in range(16)]
    finals: list[dict | None] = [None] * 16

    def client(i: int) -> None:
        with server.client() as c:
            finals[i] = chat(c, bodies[i])[-1][1]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert all(f is not None and f["done"] and "error" not in f and f["num_tokens"] == 30 for f in finals), finals
    with server.client() as c:
        alone = c.post("/query", json=bodies[3]).json()  # the same seed, now alone in its micro-batches
        m = metrics_settle(c)
    assert alone["full_text"] == finals[3]["full_text"]
    assert m["active"] == 0 and m["queue_depth"] == 0 and m["completed"] >= 16, m


def test_a_disconnect_mid_stream_frees_its_slot(server) -> None:
    with server.client() as c:
        before = c.get("/metrics").json()["cancelled"]
        # 4000 tokens: the disconnect is seen long before the last one, even on a loaded machine
        with c.stream("POST", "/chat", json={"prompt": "to", "max_tokens": 4000, "temperature": 1.0}) as r:
            got = 0
            for _, event in sse_events(r):
                got += 1
                if got == 3:
                    break  # leaving the block closes the connection mid-stream
        m = metrics_settle(c)
    assert m["active"] == 0 and m["queue_depth"] == 0, m
    assert m["cancelled"] == before + 1, m


def burst(server, n: int) -> list[httpx.Response]:
    results: list[httpx.Response | None] = [None] * n
    go = threading.Barrier(n)

    def client(i: int) -> None:
        with server.client() as c:
            go.wait()
            results[i] = c.post("/query", json={"prompt": "be", "max_tokens": 250, "seed": i})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_a_full_queue_answers_503_json(server) -> None:
    """40 requests at once against 4 slots and 12 queue places: the overflow gets 503 with a message.
    (Whether a burst overflows depends on the machine's speed; a few bursts make it certain.)"""
    for _ in range(5):
        results = burst(server, 40)
        codes = [r.status_code for r in results]
        assert set(codes) <= {200, 503}, codes
        assert all(r.json()["num_tokens"] == 250 for r in results if r.status_code == 200)
        rejected = [r.json() for r in results if r.status_code == 503]
        assert all(b["field"] == "queue" and "full" in b["error"] for b in rejected), rejected
        if rejected:
            break
    assert rejected, "no request was refused in 5 bursts of 40 against 16 places"
    with server.client() as c:
        assert c.get("/metrics").json()["rejected"] >= len(rejected)


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"max_tokens": 5}, 400, "text"),  # no prompt at all
        ({"text": ""}, 400, "text"),
        ({"prompt": ""}, 400, "prompt"),
        ({"text": 5}, 422, "text"),
        ({"text": "to be \u20ac"}, 400, "text"),  # not in the vocabulary
        ({"text": "to", "prompt": "to"}, 400, "prompt"),
        ({"text": "to", "messages": [{"role": "user", "content": "x"}]}, 400, "messages"),
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "wizard", "content": "to"}]}, 400, "messages.0.role"),
        ({"messages": [{"role": "user", "content": 5}]}, 422, "messages.0.content"),
        ({"text": "to", "max_tokens": 0}, 400, "max_tokens"),
        ({"text": "to", "max_tokens": 10**6}, 400, "max_tokens"),
        ({"text": "to", "max_tokens": "5"}, 422, "max_tokens"),
        ({"text": "to", "max_tokens": 2.5}, 422, "max_tokens"),
        ({"text": "to", "temperature": -0.5}, 400, "temperature"),
        ({"text": "to", "temperature": 1e300}, 400, "temperature"),
        ({"text": "to", "temperature": "hot"}, 422, "temperature"),
        ({"text": "to", "top_k": 0}, 400, "top_k"),
        ({"text": "to", "top_k": True}, 422, "top_k"),
        ({"text": "to", "top_p": 0}, 400, "top_p"),
        ({"text": "to", "top_p": 1.5}, 400, "top_p"),
        ({"text": "to", "decoding_strategy": "beam"}, 400, "decoding_strategy"),
        ({"text": "to", "worker_rank": 1}, 400, "worker_rank"),
        ({"text": "to", "session_id": ""}, 400, "session_id"),
        ({"text": "to", "seed": 1.5}, 422, "seed"),
        ({"text": "to", "seed": 2**70}, 400, "seed"),
        ({"text": "to", "stop": ["a"] * 5}, 400, "stop"),
    ],
)
@pytest.mark.parametrize("endpoint", ["/chat", "/query"])
def test_bad_requests_get_4xx_json_naming_the_field(server, endpoint: str, body: dict, status: int, field: str) -> None:
    with server.client() as c:
        r = c.post(endpoint, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()
    assert err["field"] == field and field in err["error"], err


def test_a_body_that_is_not_json_gets_4xx_json(server) -> None:
    with server.client() as c:
        r = c.post("/chat", content=b"{not json", headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500 and "error" in r.json(), r.text


def test_health_config_metrics(server, run_dir: Path) -> None:
    with server.client() as c:
        assert c.post("/query", json={"prompt": "to", "max_tokens": 3}).status_code == 200  # work for every stage
        health, config, metrics = (c.get(p).json() for p in ("/health", "/config", "/metrics"))
    assert health["status"] == "ok" and health["stages"] == 2 and len(health["pids"]) == 2
    run_name, checkpoint_name = config["source"].split("/")  # the run's and the checkpoint's names, no more
    assert config["random_init"] is False and run_name == run_dir.name, config
    assert (run_dir / "checkpoints" / checkpoint_name).is_dir(), config
    # what a client may know: no absolute path of the server's files, no process id
    assert str(run_dir.parent) not in str(config) and "pids" not in config, config
    # served from another directory than training's: the vocabulary came with the checkpoint
    assert config["vocab"] == "".join(sorted(set((run_dir.parent.parent / "text.txt").read_text())))
    assert [s["layers"] for s in config["stages"]] == [[0, 1], [1, 2]] and config["block_size"] == BLOCK
    assert config["available_worker_ranks"] == [0] and config["window_keep"] == KEEP and config["dtype"] == "float64"
    for key in (
        "queue_depth",
        "active",
        "slots",
        "tokens_per_second",
        "tokens_total",
        "microbatches_in_flight",
        "context_restarts",
    ):
        assert isinstance(metrics[key], (int, float)), (key, metrics)
    assert len(metrics["tokens_per_second_history"]) == metrics["history_s"]
    assert [s["stage"] for s in metrics["stages"]] == [0, 1]
    for s in metrics["stages"]:
        assert s["microbatches"] > 0 and s["mean_latency_ms"] > 0 and s["busy_s"] > 0, s
        assert 0 <= s["busy_fraction"] <= 1 and len(s["busy_fraction_history"]) == metrics["history_s"], s


def test_a_checkpoint_without_a_vocabulary_needs_its_text(run_dir: Path, tmp_path: Path) -> None:
    """A checkpoint written before apps.train stored the vocabulary: served with the run's data.path when
    that is a file from here, else a clear error; -o data.path=PATH gives it."""
    import hashlib
    import json
    import shutil

    from apps.checkpoint import CheckpointError
    from apps.serve import model_source

    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    for ckpt in (old / "checkpoints").glob("ckpt.*step*"):  # the periodic and the best one
        state = torch.load(ckpt / "iter_state_dict.pt", weights_only=True)
        assert state["extra"]["vocab"]  # what apps.train stores now
        state["extra"].pop("vocab")
        torch.save(state, ckpt / "iter_state_dict.pt")
        manifest = json.loads((ckpt / "manifest.json").read_text())
        data = (ckpt / "iter_state_dict.pt").read_bytes()
        manifest["files"]["iter_state_dict.pt"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (ckpt / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="holds no vocabulary .* -o data.path=PATH"):
        model_source.load(str(old))
    text = run_dir.parent.parent / "text.txt"
    served = model_source.load(str(old), [f"data.path={text}"])
    assert served.vocab == "".join(sorted(set(text.read_text())))


@pytest.mark.parametrize(
    "where, message", [("missing", "no such file or directory"), ("empty_run", "has no complete checkpoint")]
)
def test_a_bad_checkpoint_is_a_clear_error_before_serving(tmp_path: Path, where: str, message: str) -> None:
    import subprocess
    import sys

    from tests.launch import ROOT, worker_env

    path = tmp_path / where
    if where == "empty_run":  # a run directory whose training has not written a checkpoint yet
        path.mkdir()
        (path / "config.yaml").write_text("name: x\nmodel: {name: gpt}\ndata: {name: text, path: x.txt}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "apps.serve", "--checkpoint", str(path), "--port", "0"],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
