"""The fault-tolerant algorithms' rules (docs/algorithms.md "Parameter servers and bounded staleness") against
independent simulations written from the rule, on real independent processes talking over ZeroMQ:
syncps with a = 0 is mbsgd and with a > 0 blends with the period's mean; asyncps with one worker is plain
SGD; asyncps with a scripted arrival order follows the hand-computed staleness-scaled sequence; ssp with
K = 0 is mbsgd; ssp with K = 2 and a rank 3x slower never sees staleness > 2 and does see 2."""

from __future__ import annotations

import json

import pytest
import torch

import algorithms
from algorithms.ps import layout
from tests.algorithms.problem import make_inner, make_model
from tests.algorithms.ps_cases import STEPS, WORKER, case, flat, register, results, simulate
from tests.launch import SECRET, finish, independent

# run by the one launch of independent processes of tests/algorithms/ps_cases.py
CASES = register(
    "rules",
    {
        "asyncps-1-worker": case("asyncps", 2, {"pull_every": 1}),
        "syncps-0.0-1": case("syncps", 4, {"polyak_alpha": 0.0, "pull_every": 1}),
        "syncps-0.5-3": case("syncps", 4, {"polyak_alpha": 0.5, "pull_every": 3}),
        "ssp-0": case("ssp", 3, {"staleness_bound": 0}),
        "ssp-2-slow": case("ssp", 3, {"staleness_bound": 2}, steps=24, slow=(1, 3.0)),
    },
)


@pytest.mark.timeout(600)
def test_asyncps_with_one_worker_is_plain_sgd():
    server, worker = results("rules", "asyncps-1-worker")
    expected = simulate([1], STEPS, "momentum")
    torch.testing.assert_close(flat(server["params"]), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(flat(worker["params"]), expected, rtol=0, atol=1e-6)
    assert server["stats"]["max_staleness"] == 0 and server["stats"]["rejected"] == 0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("alpha,period", [(0.0, 1), (0.5, 3)])
def test_syncps_is_mbsgd_then_polyak_blend(alpha, period):
    ranks = results("rules", f"syncps-{alpha}-{period}")
    expected = simulate([1, 2, 3], STEPS, "momentum", alpha, period)
    for r in ranks:  # the server and every worker (each pulled the last round's parameters)
        torch.testing.assert_close(flat(r["params"]), expected, rtol=0, atol=1e-5)
    assert ranks[0]["summary"]["version"] == STEPS and ranks[0]["summary"]["finished"] == [1, 2, 3]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("K", [0])
def test_ssp_with_bound_0_is_mbsgd(K):
    expected = simulate([0, 1, 2], STEPS, "momentum")
    for r in results("rules", f"ssp-{K}"):
        torch.testing.assert_close(flat(r["params"]), expected, rtol=0, atol=1e-5)
        assert r["stats"]["max_staleness"] == 0


@pytest.mark.timeout(600)
def test_ssp_staleness_stays_within_bound_and_reaches_it():
    ranks = results("rules", "ssp-2-slow")  # 24 steps, rank 1 3x slower
    seen = [r["stats"]["max_staleness"] for r in ranks]
    assert max(seen) <= 2, seen
    assert max(seen) == 2, f"the fast ranks never ran 2 steps ahead of the slow one: {seen}"
    for r in ranks[1:]:  # same sequence of averaged steps on every replica
        torch.testing.assert_close(flat(r["params"]), flat(ranks[0]["params"]), rtol=0, atol=1e-6)


def _worker(monkeypatch, rank: int, base: int, bound: int):
    monkeypatch.setenv(layout.RANK_ENV, str(rank))
    monkeypatch.setenv(layout.WORLD_ENV, "3")
    monkeypatch.setenv(layout.ADDRESS_ENV, f"127.0.0.1:{base}")
    monkeypatch.setenv(layout.SECRET_ENV, SECRET)
    model = make_model(seed=7)
    opt = algorithms.CommOptimizer(
        make_inner("sgd", model.parameters(), lr=0.1),
        algorithm="asyncps",
        model=model,
        pull_every=1000,
        staleness_bound=bound,
        worker_timeout=20,
    )
    return model, opt


@pytest.mark.timeout(600)
def test_asyncps_scripted_arrival_order(tmp_path, monkeypatch):
    """Two workers in this process push scripted gradients in a fixed order to a real server process
    (plain SGD, lr 0.1, bound K = 1); the server's parameters follow the hand-computed sequence."""
    server = independent(
        3,
        WORKER,
        "asyncps",
        json.dumps({"pull_every": 1000, "staleness_bound": 1, "worker_timeout": 20}),
        "0",
        str(tmp_path),
        "sgd",
        ranks=[0],
    )
    base = server[0].base_port
    (m1, w1), (m2, w2) = _worker(monkeypatch, 1, base, 1), _worker(monkeypatch, 2, base, 1)
    x = flat(m1.parameters()).clone()  # both adopted the server's (rank 0's) parameters at greeting
    torch.testing.assert_close(flat(m2.parameters()), x)

    def push(w, model, value):
        for p in model.parameters():
            p.grad = torch.full_like(p, value)
        w.step()
        return torch.full_like(x, value)

    lr = 0.1
    g = push(w1, m1, 1.0)
    x = x - lr * g  # v0 -> s = 0, applied: v1
    g = push(w2, m2, 2.0)
    x = x - lr / 2 * g  # v0 at server v1: s = 1, step / 2: v2
    push(w1, m1, 3.0)  # v0 at v2: s = 2 > K: rejected, w1 pulls v2
    torch.testing.assert_close(flat(m1.parameters()), x)
    g = push(w1, m1, 4.0)
    x = x - lr * g  # v2 at v2: s = 0: v3
    push(w2, m2, 5.0)  # v0 at v3: s = 3: rejected, w2 pulls v3
    torch.testing.assert_close(flat(m2.parameters()), x)
    g = push(w2, m2, 6.0)
    x = x - lr * g  # s = 0: v4
    assert w1.comm_stats()["rejected"] == 1 and w2.comm_stats()["rejected"] == 1
    w1.close(), w2.close()
    finish(server)
    result = torch.load(tmp_path / "rank0.pt")
    torch.testing.assert_close(flat(result["params"]), x, rtol=0, atol=1e-6)
    stats = result["stats"]
    assert (stats["max_staleness"], stats["rejected"], stats["mean_staleness"]) == (3, 2, 1.0)
    assert result["summary"]["version"] == 4


@pytest.mark.mpi
@pytest.mark.timeout(600)
def test_syncps_under_mpirun_exchanges_addresses_over_the_communicator(tmp_path):
    """Started by mpirun instead of independently: each rank's address is all-gathered over pycomm's
    communicator once, then everything goes over ZeroMQ; the rule is the same (a = 0: mbsgd)."""
    from tests.launch import mpirun

    mpirun(3, WORKER, "syncps", json.dumps({"worker_timeout": 20}), str(STEPS), str(tmp_path), "momentum")
    expected = simulate([1, 2], STEPS, "momentum")
    for r in range(3):
        torch.testing.assert_close(flat(torch.load(tmp_path / f"rank{r}.pt")["params"]), expected, rtol=0, atol=1e-5)
