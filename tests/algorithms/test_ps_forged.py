"""Forged peers, from a process of their own (tests/algorithms/workers/ps_forger.py), against a running
parameter server and running ssp ranks: messages without the run's secret (15 bytes of JSON, JSON that is
not an object, garbage, a hello signed with another secret) get no answer at all and crash nothing; signed
ones with implausible content (an unknown rank, a NaN gradient, a step of 10^9, a wrong size) are dropped,
never applied;
and the real ranks then train to exactly the result of an undisturbed run."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

from tests.algorithms.ps_cases import STEPS, WORKER, flat, simulate
from tests.launch import ROOT, SECRET, finish, independent, worker_env

FORGER = "tests.algorithms.workers.ps_forger"


def forge(*args: str) -> dict:
    """Run the forger (with the run's secret in its environment, as a rank has it); what it saw."""
    done = subprocess.run(
        [sys.executable, "-m", FORGER, *args],
        cwd=ROOT,
        env=worker_env({"PYCOMM_PS_SECRET": SECRET}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.timeout(600)
def test_a_server_drops_forged_messages_and_serves_the_real_worker(tmp_path):
    args = ["asyncps", json.dumps({"worker_timeout": 30, "pull_every": 1}), str(STEPS), str(tmp_path), "momentum"]
    server = independent(2, WORKER, *args, ranks=[0])
    seen = forge("server", f"127.0.0.1:{server[0].base_port}", "0", "1")
    assert server[0].poll() is None, "a forged message ended the server"
    worker = independent(2, WORKER, *args, ranks=[1], base_port=server[0].base_port)
    (_, _, err), _ = finish(server + worker, timeout=400)

    assert seen["unsigned"] == {"json15": [], "not_an_object": [], "garbage": [], "wrong_secret_hello": []}, seen
    assert seen["signed_not_an_object"] is False
    assert seen["unknown_rank_hello"] is None, seen
    assert seen["hello"] is not None and seen["hello"].get("error") is None, seen
    assert seen["nan_push"]["rejected"] is True and seen["far_step_push"] is None, seen
    assert seen["wrong_size_push"]["rejected"] is True, seen

    summary = torch.load(tmp_path / "rank0.pt")["summary"]
    assert summary["dropped"] == {"unauthenticated": 4, "malformed": 1, "unknown rank": 1, "invalid push": 3}, (
        summary,
        err,
    )
    assert summary["version"] == STEPS and summary["finished"] == [1], summary  # every real push applied
    # one worker, asyncps, pull_every=1: plain SGD, as if no forger had spoken (and finite)
    torch.testing.assert_close(
        flat(torch.load(tmp_path / "rank0.pt")["params"]), simulate([1], STEPS, "momentum"), rtol=0, atol=1e-6
    )
    assert "dropped a message from a peer without this run's secret" in err, err


@pytest.mark.timeout(600)
def test_an_ssp_rank_drops_forged_messages_and_trains_on(tmp_path):
    # rank 1 takes about 1 s a step (tests/algorithms/workers/ps_rules.py's slow rank): the forger's
    # messages arrive while the run is under way
    args = [
        "ssp",
        json.dumps({"worker_timeout": 30, "staleness_bound": 0}),
        str(STEPS),
        str(tmp_path),
        "momentum",
        "1",
        "50",
    ]
    ranks = independent(2, WORKER, *args)
    time.sleep(1.0)
    seen = forge("ssp", f"127.0.0.1:{ranks[0].base_port + 1}", "1", "0", str(STEPS - 1))
    (_, _, err0), (_, _, err1) = finish(ranks, timeout=400)  # both exit 0

    assert seen["unsigned"] == {"json15": [], "not_an_object": [], "garbage": [], "wrong_secret_hello": []}, seen
    assert seen["signed_answers"] == 0
    # the forger's messages reached rank 1 while it ran, and were dropped
    for line in (
        "dropped a message from a peer without this run's secret",
        "dropped a malformed message",
        "dropped a grad message from rank 0: grad message carries NaN",
    ):
        assert line in err1, err1
    expected = simulate([0, 1], STEPS, "momentum")  # K = 0: mbsgd, as if no forger had spoken
    for r in range(2):
        torch.testing.assert_close(flat(torch.load(tmp_path / f"rank{r}.pt")["params"]), expected, rtol=0, atol=1e-6)
