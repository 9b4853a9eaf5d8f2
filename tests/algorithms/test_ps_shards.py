"""Parameter servers with servers > 1 (the parameters sharded across the server ranks), on real independent
processes talking over ZeroMQ: the split is contiguous, balanced and never empty; syncps and one-worker
asyncps with 2 servers give exactly what 1 server gives (each shard steps elementwise as the whole would),
3-worker asyncps with int8 pushes and a staleness bound trains, and a shard server that dies is named by
the worker that lost it."""

from __future__ import annotations

import json
import time

import pytest
import torch

from algorithms.options import OptionError
from algorithms.ps import shards
from tests.algorithms.problem import loss_on, make_model
from tests.algorithms.ps_cases import STEPS, WORKER, case, flat, register, results, simulate
from tests.launch import finish, independent

INT8_STEPS = 30
# run by the one launch of independent processes of tests/algorithms/ps_cases.py; with 2 servers the world
# has one process more and the same workers
CASES = register(
    "shards",
    {
        "asyncps-1-servers-1": case("asyncps", 2, {"pull_every": 1}),
        "asyncps-1-servers-2": case("asyncps", 3, {"pull_every": 1, "servers": 2}),
        "syncps-3-servers-1": case("syncps", 4, {"polyak_alpha": 0.5, "pull_every": 3}),
        "syncps-3-servers-2": case("syncps", 5, {"polyak_alpha": 0.5, "pull_every": 3, "servers": 2}),
        "asyncps-int8-bound-1": case(
            "asyncps",
            5,
            {"servers": 2, "codec": "int8", "staleness_bound": 1, "pull_every": 2},
            inner="sgd",
            steps=INT8_STEPS,
        ),
    },
)


def test_shards_are_contiguous_balanced_and_never_empty():
    params = [torch.zeros(n) for n in (60, 10, 30, 3, 1)]
    split = shards.split(params, 2)
    assert [s.tensors for s in split] == [(0, 1), (1, 5)]
    assert [s.elements for s in split] == [(0, 60), (60, 104)]
    split = shards.split(params, 5)  # as many servers as tensors: one tensor each
    assert [s.tensors for s in split] == [(i, i + 1) for i in range(5)]
    vector = torch.arange(104.0)
    assert torch.equal(torch.cat([s.slice(vector) for s in shards.split(params, 3)]), vector)
    with pytest.raises(OptionError, match="servers=6: the model has 5 parameter tensors"):
        shards.split(params, 6)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "algorithm,workers,options,reference",
    [
        ("asyncps", 1, {"pull_every": 1}, lambda: simulate([1], STEPS, "momentum")),
        ("syncps", 3, {"polyak_alpha": 0.5, "pull_every": 3}, lambda: simulate([1, 2, 3], STEPS, "momentum", 0.5, 3)),
    ],
)
def test_two_servers_equal_one_server_exactly(algorithm, workers, options, reference):
    name = f"{algorithm}-{workers}-servers"
    assert CASES[f"{name}-2"] == case(algorithm, 2 + workers, {**options, "servers": 2})
    assert CASES[f"{name}-1"] == case(algorithm, 1 + workers, options)
    one, two = results("shards", f"{name}-1"), results("shards", f"{name}-2")
    # server 0 (which gathered the other shard at the end) and every worker hold the same model as with 1 server
    for a, b in zip([one[0], *one[1:]], [two[0], *two[2:]]):
        torch.testing.assert_close(flat(b["params"]), flat(a["params"]), rtol=0, atol=0)
    torch.testing.assert_close(flat(two[0]["params"]), reference(), rtol=0, atol=1e-5)
    for server in two[:2]:  # each shard server stepped once per round (syncps) / push (asyncps)
        assert server["summary"]["version"] == STEPS
        assert server["summary"]["finished"] == list(range(2, 2 + workers))
        assert server["stats"]["rejected"] == 0 and server["stats"]["max_staleness"] == 0
    for worker in two[2:]:  # the worker's statistics cover both shards: one staleness per shard push
        stats = worker["stats"]
        assert sum(stats["staleness_histogram"].values()) == 2 * STEPS and stats["rejected"] == 0
        assert stats["bytes_pushed"] > 0 and stats["bytes_pulled"] > 0


@pytest.mark.timeout(600)
def test_asyncps_two_servers_int8_with_a_bound_trains():
    steps = INT8_STEPS
    ranks = results("shards", "asyncps-int8-bound-1")
    model = make_model(seed=1)
    before = sum(loss_on(model, r, t).item() for r in (1, 2, 3) for t in range(steps))
    torch.nn.utils.vector_to_parameters(flat(ranks[0]["params"]), model.parameters())
    after = sum(loss_on(model, r, t).item() for r in (1, 2, 3) for t in range(steps))
    assert after < before, (before, after)  # random labels: learnt slowly, but learnt
    for server in ranks[:2]:  # each shard counted its own versions and staleness, within the bound once applied
        summary = server["summary"]
        assert summary["finished"] == [2, 3, 4]
        assert summary["version"] + summary["rejected"] == 3 * steps
    workers = [r["stats"] for r in ranks[2:]]
    assert sum(w["rejected"] for w in workers) == sum(r["summary"]["rejected"] for r in ranks[:2])


@pytest.mark.timeout(300)
def test_a_dead_shard_server_is_named_by_the_worker(tmp_path):
    options = {"servers": 2, "worker_timeout": 1, "server_timeout": 3}
    procs = independent(3, WORKER, "asyncps", json.dumps(options), "100000", str(tmp_path), "sgd", "2", "1")
    time.sleep(3)
    procs[1].kill()  # SIGKILL server 1 (it holds shard 1)
    procs[1].wait()
    ((worker_code, _, worker_err),) = finish(procs[2:], timeout=120, expect_ok=False)
    assert worker_code != 0
    assert "no answer from server 1 at 127.0.0.1:" in worker_err, worker_err
    ((server_code, _, server_err),) = finish(procs[:1], timeout=120)
    assert "worker 2 lost: no message for" in server_err, server_err
    assert "could not gather the final shards: rank 0: no answer from server 1" in server_err, server_err
