"""Run every rule configuration with pycomm on real ranks and compare each step with the
independent simulation (fp32, tolerance 1e-6). Usage: rules OUT_DIR [CONFIG ...]"""
from __future__ import annotations

import sys
import traceback

from tests.algorithms.configs import RULES, STEPS
from tests.algorithms.simulate import simulate
from tests.algorithms.workers.common import build, finish, max_diff, report, train, world

TOL = 1e-6


def main() -> None:
    out_dir, names = sys.argv[1], sys.argv[2:] or list(RULES)
    comm = world()
    results, failures = {}, 0
    for name in names:
        algorithm, options, inner, batchnorm, schedule = RULES[name]
        try:
            model, opt = build(comm, algorithm, options, inner, batchnorm)
            got = train(comm, model, opt, 0, STEPS, schedule)
            want = simulate(algorithm, options, comm.size, STEPS, inner, batchnorm, schedule)
            diffs = [max_diff(g, w[comm.rank]) for g, w in zip(got, want)]
            spread = max(max_diff(w[0], w[-1]) for w in want)   # the workers really differ between rounds
            ok = max(diffs) <= TOL
            results[name] = {"ok": ok, "max_diff": max(diffs), "per_step": diffs, "worker_spread": spread,
                             "comm_stats": opt.comm_stats(), "period": opt.current_period}
        except Exception:
            results[name] = {"ok": False, "error": traceback.format_exc()}
            ok = False
        failures += not ok
        print(f"rank {comm.rank} {name}: {results[name].get('max_diff', results[name].get('error'))}", flush=True)
    report(out_dir, comm.rank, results)
    finish(failures)


if __name__ == "__main__":
    main()
