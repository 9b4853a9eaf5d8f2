"""`python -m apps.serve --nproc 2` for real: a tiny GPT trained by apps.train, served in 2 pipeline
stages on 2 ranks, spoken to over HTTP (streaming, concurrency, disconnects, bad requests)."""
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

SLOTS, QUEUE = 4, 12   # 16 clients: 4 generating, 12 waiting


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny_gpt(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(run_dir: Path):
    with serving("--nproc", "2", "--checkpoint", str(run_dir), "--slots", str(SLOTS), "--queue", str(QUEUE)) as s:
        yield s


def reference_greedy(run_dir: Path, prompt: str, n: int) -> str:
    """Greedy generation on one process with the plain full forward (no cache, no pipeline)."""
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    vocab = "".join(sorted(set(Path(cfg["data"]["path"]).read_text())))
    newest = sorted((run_dir / "checkpoints").glob("ckpt.*step*"))[-1]
    opts = cfg["model"]["options"]
    model = GPT(len(vocab), cfg["data"]["options"]["block_size"], opts["n_layer"], opts["n_head"], opts["n_embd"], 0.0)
    model.load_state_dict(torch.load(newest / "model_state_dict.pt", weights_only=True))
    model.eval()
    idx = torch.tensor([[vocab.index(c) for c in prompt]])
    with torch.no_grad():
        for _ in range(n):
            idx = torch.cat([idx, model(idx)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return "".join(vocab[i] for i in idx[0, len(prompt):].tolist())


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


def test_query_returns_the_whole_answer(server, run_dir: Path) -> None:
    with server.client() as c:
        r = c.post("/query", json={"prompt": "whether", "max_tokens": 10, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["num_tokens"] == 10 and body["full_text"] == reference_greedy(run_dir, "whether", 10)


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
        alone = c.post("/query", json=bodies[3]).json()   # the same seed, now alone in its micro-batches
        m = metrics_settle(c)
    assert alone["full_text"] == finals[3]["full_text"]
    assert m["active"] == 0 and m["queue_depth"] == 0 and m["completed"] >= 16, m


def test_a_disconnect_mid_stream_frees_its_slot(server) -> None:
    with server.client() as c:
        before = c.get("/metrics").json()["cancelled"]
        with c.stream("POST", "/chat", json={"prompt": "to", "max_tokens": 250, "temperature": 1.0}) as r:
            got = 0
            for _, event in sse_events(r):
                got += 1
                if got == 3:
                    break   # leaving the block closes the connection mid-stream
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


@pytest.mark.parametrize("body, status, field", [
    ({"max_tokens": 5}, 422, "prompt"),
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": 5}, 422, "prompt"),
    ({"prompt": "to be \u20ac"}, 400, "prompt"),            # not in the vocabulary
    ({"prompt": "to", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "to", "max_tokens": 10**6}, 400, "max_tokens"),
    ({"prompt": "to", "max_tokens": "5"}, 422, "max_tokens"),
    ({"prompt": "to", "max_tokens": 2.5}, 422, "max_tokens"),
    ({"prompt": "to", "temperature": -0.5}, 400, "temperature"),
    ({"prompt": "to", "temperature": "hot"}, 422, "temperature"),
    ({"prompt": "to", "top_k": 0}, 400, "top_k"),
    ({"prompt": "to", "top_k": True}, 422, "top_k"),
    ({"prompt": "to", "seed": 1.5}, 422, "seed"),
    ({"prompt": "to", "seed": 2**70}, 400, "seed"),
])
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
        assert c.post("/query", json={"prompt": "to", "max_tokens": 3}).status_code == 200   # work for every stage
        health, config, metrics = (c.get(p).json() for p in ("/health", "/config", "/metrics"))
    assert health["status"] == "ok" and health["stages"] == 2 and len(health["pids"]) == 2
    assert config["random_init"] is False and Path(config["source"]).parent == run_dir / "checkpoints"
    assert config["vocab"] == "".join(sorted(set((run_dir.parent.parent / "text.txt").read_text())))
    assert [s["layers"] for s in config["stages"]] == [[0, 1], [1, 2]] and config["block_size"] == 256
    for key in ("queue_depth", "active", "slots", "tokens_per_second", "tokens_total", "microbatches_in_flight"):
        assert isinstance(metrics[key], (int, float)), (key, metrics)
    assert [s["stage"] for s in metrics["stages"]] == [0, 1]
    for s in metrics["stages"]:
        assert s["microbatches"] > 0 and s["mean_latency_ms"] > 0 and s["busy_s"] > 0, s


@pytest.mark.parametrize("where, message", [("missing", "no such file or directory"),
                                            ("empty_run", "has no complete checkpoint")])
def test_a_bad_checkpoint_is_a_clear_error_before_serving(tmp_path: Path, where: str, message: str) -> None:
    import subprocess
    import sys

    from tests.launch import ROOT, worker_env

    path = tmp_path / where
    if where == "empty_run":   # a run directory whose training has not written a checkpoint yet
        path.mkdir()
        (path / "config.yaml").write_text("name: x\nmodel: {name: gpt}\ndata: {name: text, path: x.txt}\n")
    proc = subprocess.run([sys.executable, "-m", "apps.serve", "--checkpoint", str(path), "--port", "0"], cwd=ROOT,
                          env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
