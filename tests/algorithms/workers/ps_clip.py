"""opt.clip_grad_norm_ under a parameter server (syncps, 3 ranks under mpirun: a server and two workers).
A worker clips the gradient it is about to push, its own: the norm equals torch's on a copy of its model,
and the gradients are scaled to max_norm; the server holds no gradient and refuses, naming the workers.
Each rank writes OUT/rank<r>.json.

    python -m tests.algorithms.workers.ps_clip OUT"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch

import algorithms
import pycomm
from tests.algorithms.problem import loss_on, make_inner, make_model

MAX_NORM, STEPS = 1e-3, 2


def main() -> None:
    torch.set_num_threads(1)
    rank = pycomm.init().rank
    model = make_model(seed=1)
    opt = algorithms.CommOptimizer(
        make_inner("sgd", model.parameters()), algorithm="syncps", model=model, worker_timeout=20
    )
    result: dict = {"ok": False}
    if opt.is_server:
        try:
            opt.clip_grad_norm_(MAX_NORM)
        except RuntimeError as e:
            result["message"] = str(e)
        result["ok"] = "clip on the workers" in result.get("message", "")
        opt.serve()
    else:
        checks = []
        for t in range(STEPS):
            opt.zero_grad()
            twin = copy.deepcopy(model)
            loss_on(twin, rank, t).backward()
            want = float(torch.nn.utils.get_total_norm([p.grad for p in twin.parameters()]))
            loss = loss_on(model, rank, t)
            loss.backward()
            norm = float(opt.clip_grad_norm_(MAX_NORM))
            after = float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]))
            checks.append(abs(norm - want) <= 1e-6 * want and abs(after - MAX_NORM) <= 1e-3 * MAX_NORM < want)
            opt.step(loss=loss)
        opt.close()
        result.update(ok=all(checks), checks=checks)
    (Path(sys.argv[1]) / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
