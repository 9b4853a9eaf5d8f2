"""state_dict mid-run, loaded into a fresh model and optimizer, continues exactly the uninterrupted
trajectory. Usage: resume OUT_DIR"""

from __future__ import annotations

import io
from typing import Any

import torch

from tests.algorithms.configs import RULES, STEPS
from tests.algorithms.workers.common import build, max_diff, run_cases, train, world

CASES = [
    "mbsgd-momentum",
    "plsgd-bn",
    "qsr-sgd",
    "qsr-adamw",
    "easgd",
    "easgd+",
    "lsgd-loss",
    "lsgd-proxy",
    "lsgd+",
    "diloco-stream",
    "diloco-qsr",  # diloco-stream: fragment 0's round is in flight at the cut
    "mbsgd-momentum/int8",
    "plsgd-bn/onebit",
    "easgd/int8",
    "diloco-stream/int4",
]  # /codec: residuals resume too
CUT = 5  # mid-period for every case


def roundtrip(obj: object) -> object:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def resume(comm: Any, case: str) -> dict[str, Any]:
    name, _, codec = case.partition("/")
    algorithm, options, inner, batchnorm, schedule = RULES[name]
    options = {**options, "codec": codec or None}
    model, opt = build(comm, algorithm, options, inner, batchnorm)
    whole = train(comm, model, opt, 0, STEPS, schedule)

    model, opt = build(comm, algorithm, options, inner, batchnorm)
    first = train(comm, model, opt, 0, CUT, schedule)
    saved = roundtrip({"model": model.state_dict(), "opt": opt.state_dict()})
    model, opt = build(comm, algorithm, options, inner, batchnorm, init_seed=99)  # fresh everything
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    rest = train(comm, model, opt, CUT, STEPS, schedule)
    diff = max(max_diff(a, b) for a, b in zip(whole, first + rest))
    return {"ok": diff == 0.0, "max_diff": diff, "algorithm_state_keys": sorted(saved["opt"]["algorithm_state"])}


def main() -> None:
    comm = world()
    run_cases(comm, ((name, lambda name=name: resume(comm, name)) for name in CASES))


if __name__ == "__main__":
    main()
