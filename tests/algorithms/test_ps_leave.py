"""A worker's goodbye is confirmed by its server: one sent to a server that is killed before it answers is
said again to the restarted server, which then counts the worker finished, not lost (tests/apps/test_fault_matrix.py
found it: a worker that finished while its server was down was recorded as lost by the successor)."""

from __future__ import annotations

import json
import threading
import time
import warnings

import pytest
import torch

from algorithms.ps import server_state
from tests.algorithms.problem import loss_on, make_model
from tests.algorithms.test_ps_options import WORKER, _build, _env
from tests.launch import finish, independent

STEPS = 3
SUCCESSOR_DELAY_S = 4.0  # past the 2 s a closing ZeroMQ context keeps an undelivered goodbye (LINGER_MS)


@pytest.mark.timeout(300)
def test_a_goodbye_lost_with_a_killed_server_is_said_again_to_its_successor(tmp_path, monkeypatch):
    options = {"worker_timeout": 2, "checkpoint_dir": str(tmp_path / "ckpt"), "checkpoint_every": 1}
    server = independent(2, WORKER, "asyncps", json.dumps(options), "0", str(tmp_path), "sgd", ranks=[0])
    port = server[0].base_port
    _env(monkeypatch, 1, 2, port)
    model = make_model(seed=1)
    opt = _build("asyncps", model=model, **options)
    for t in range(STEPS):
        opt.zero_grad()
        loss = loss_on(model, 1, t)
        loss.backward()
        opt.step(loss=loss)
    # the successor must resume: the server checkpoints after it has answered a push, so on a loaded machine
    # it can be killed before its first checkpoint (the successor then starts at version 0)
    saved = server_state.path_for(tmp_path / "ckpt", 0)
    deadline = time.monotonic() + 120
    while not (saved.exists() and server_state.load(saved)["version"] == STEPS) and time.monotonic() < deadline:
        time.sleep(0.05)
    server[0].kill()
    server[0].communicate()
    successor: list = []
    start = threading.Timer(
        SUCCESSOR_DELAY_S,
        lambda: successor.extend(
            independent(
                2,
                WORKER,
                "asyncps",
                json.dumps({**options, "resume": True}),
                "0",
                str(tmp_path),
                "sgd",
                ranks=[0],
                base_port=port,
            )
        ),
    )
    start.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # "did not confirm its bye" would fail the test
            opt.close()
    finally:
        start.join()
    ((_, _, err),) = finish(successor)
    summary = torch.load(tmp_path / "rank0.pt")["summary"]
    assert summary["finished"] == [1] and summary["lost"] == {}, (summary, err)
    assert f"worker 1 finished at step {STEPS}" in err, err
    assert "resumed from" in err, err
