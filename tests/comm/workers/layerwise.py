"""Worker: LayerwiseAverager keeps the local updates made while the averages are in flight:
after the round, x == mean over ranks of the snapshots + this rank's updates since start()."""

from __future__ import annotations

import time

import numpy as np
import torch

import pycomm
from tests.comm.workers.fusion_common import expect_raises, rank_values, world

SHAPES = {
    "conv1": [(16, 3, 3, 3), (16,)],
    "bn1": [(16,), (16,)],
    "empty": [(0,)],
    "fc": [(10, 37), (10,)],
    "scalar": [()],
    "big": [(5000,)],
}


def layer_values(seed: int, rank: int) -> dict[str, list[torch.Tensor]]:
    out = {}
    for i, (name, shapes) in enumerate(SHAPES.items()):
        out[name] = [
            rank_values(seed * 100 + i * 10 + j, rank, int(np.prod(s)), torch.float32).reshape(s)
            for j, s in enumerate(shapes)
        ]
    return out


def mean_over_ranks(seed: int, size: int) -> dict[str, list[torch.Tensor]]:
    per_rank = [layer_values(seed, r) for r in range(size)]
    return {
        name: [sum(p[name][j].double() for p in per_rank) / size for j in range(len(shapes))]
        for name, shapes in SHAPES.items()
    }


def assert_close(got: dict, want: dict, tol: float, what: str) -> None:
    for name in SHAPES:
        for j, (g, w) in enumerate(zip(got[name], want[name])):
            err = (g.double() - w.double()).abs().max().item() if g.numel() else 0.0
            assert err <= tol, f"{what}: layer {name} tensor {j}: max error {err} > {tol}"


def int8_tolerance(snapshots: list[dict]) -> float:
    """Two int8 stages (each rank's snapshot, then the reduced chunk) each err by at most scale / 2 =
    absmax / 254 per element; absmax is bounded by the largest snapshot value (plus fp32 slack)."""
    m = max(t.abs().max().item() for s in snapshots for ts in s.values() for t in ts if t.numel())
    return 2 * m / 254 * 1.001 + 1e-5


def poll_until_done(avg: pycomm.LayerwiseAverager) -> int:
    applied, deadline = 0, time.monotonic() + 120
    while avg.pending:
        applied += avg.poll()
        assert time.monotonic() < deadline, f"layers still pending: {avg.pending}"
        time.sleep(0.001)
    return applied


def check_round(comm, codec=None, offset: float = 0.0) -> None:
    """Two rounds. Round 1 runs while local updates happen; it is exact even through a codec (no
    common reference yet). Round 2 through a codec carries each rank's drift from round 1's average,
    so its error is bounded by the drift's size, whatever `offset` every weight carries."""
    params = {n: [t + offset for t in ts] for n, ts in layer_values(1, comm.rank).items()}
    avg = pycomm.LayerwiseAverager(params, comm, codec=codec)
    first, second = layer_values(2, comm.rank), layer_values(3, comm.rank)
    bytes_exact = avg.next_round_bytes()
    assert bytes_exact == sum(t.numel() * 4 for ts in params.values() for t in ts), bytes_exact
    avg.start()
    for name in SHAPES:  # local steps while the averages are in flight
        for p, d in zip(params[name], first[name]):
            p.add_(d)
    avg.wait("fc")
    assert "fc" not in avg.pending
    for name in SHAPES:  # more local steps, some layers already averaged
        for p, d in zip(params[name], second[name]):
            p.add_(d)
    assert poll_until_done(avg) + 1 == len(SHAPES)
    mean = mean_over_ranks(1, comm.size)
    drift = [
        {n: [a.double() + b.double() for a, b in zip(layer_values(2, r)[n], layer_values(3, r)[n])] for n in SHAPES}
        for r in range(comm.size)
    ]
    wants = [{n: [w + offset + d for w, d in zip(mean[n], drift[r][n])] for n in SHAPES} for r in range(comm.size)]
    assert_close(params, wants[comm.rank], 1e-5 * (1 + offset), f"round 1 with codec={codec}")

    # round 2, no local updates: the (now differing) parameters are averaged again
    if codec is not None:
        assert avg.next_round_bytes() < bytes_exact / 3, (avg.next_round_bytes(), bytes_exact)
    avg.start()
    avg.wait()
    assert not avg.pending
    want2 = {n: [sum(w[n][j] for w in wants) / comm.size for j in range(len(s))] for n, s in SHAPES.items()}
    tol2 = 1e-5 * (1 + offset) + (0 if codec is None else int8_tolerance(drift))
    assert_close(params, want2, tol2, f"round 2 with codec={codec}, offset {offset}")


def check_bad_input(comm) -> None:
    expect_raises(TypeError, "params_by_layer must be", lambda: pycomm.LayerwiseAverager(torch.ones(3), comm))
    expect_raises(ValueError, "empty", lambda: pycomm.LayerwiseAverager([], comm))
    expect_raises(
        TypeError,
        r"layer 0 tensor 0.*dtype",
        lambda: pycomm.LayerwiseAverager([[torch.ones(3, dtype=torch.int64)]], comm),
    )
    expect_raises(
        ValueError,
        r"layer 'w' tensor 0.*contiguous",
        lambda: pycomm.LayerwiseAverager({"w": torch.ones(3, 3).t()}, comm),
    )
    # once accepted, failing only at start() with an AttributeError
    expect_raises(
        TypeError, "comm must be a pycomm.Communicator", lambda: pycomm.LayerwiseAverager([torch.ones(3)], "x")
    )
    expect_raises(
        TypeError,
        r"params_by_layer: layer 0 tensor 0: expected a torch.Tensor, got float",
        lambda: pycomm.LayerwiseAverager([[1.0]], comm),
    )
    avg = pycomm.LayerwiseAverager([torch.ones(4)], comm)
    expect_raises(KeyError, "no layer 7", lambda: avg.wait(7))
    avg.start()
    expect_raises(RuntimeError, "still pending", avg.start)
    avg.wait()


def main() -> None:
    comm = world()
    check_bad_input(comm)
    check_round(comm)
    check_round(comm, codec=pycomm.Int8Codec(block=64))
    check_round(comm, codec=pycomm.Int8Codec(block=64), offset=100.0)  # raw weights would err by ~0.8
    print(f"rank {comm.rank}/{comm.size}: layerwise ok", flush=True)


if __name__ == "__main__":
    main()
