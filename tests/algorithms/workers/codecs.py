"""Every algorithm that averages or all-reduces, through the int8 and 1-bit codecs: close to the exact
(uncompressed) simulation, and fewer bytes than the same run uncompressed. Usage: codecs OUT_DIR"""
from __future__ import annotations

import sys
import traceback

import pycomm
from tests.algorithms.configs import RULES, STEPS
from tests.algorithms.simulate import simulate
from tests.algorithms.workers.common import build, finish, max_diff, report, train, world

CASES = ["mbsgd-momentum", "plsgd-bn", "qsr-adamw", "easgd", "easgd+", "lsgd+"]
CODECS = {"int8": lambda: pycomm.Int8Codec(block=64), "onebit": lambda: pycomm.OneBitCodec(block=64)}
INT8_TOL = 2e-2       # int8 error per round is <= absmax/254 of what travels; a few rounds of it
# Bytes against the uncompressed run: gradients (mbsgd) all travel compressed; the others also send
# uncompressed buffers / optimizer state / leader broadcasts, so only "fewer" is asked of them.
BYTES_RATIO = {("mbsgd-momentum", "int8"): 0.35, ("mbsgd-momentum", "onebit"): 0.15}


def main() -> None:
    out_dir = sys.argv[1]
    comm = world()
    results, failures = {}, 0
    for name in CASES:
        algorithm, options, inner, batchnorm, schedule = RULES[name]
        plain_model, plain_opt = build(comm, algorithm, options, inner, batchnorm)
        train(comm, plain_model, plain_opt, 0, STEPS, schedule)
        want = simulate(algorithm, options, comm.size, STEPS, inner, batchnorm, schedule)
        for codec_name, make in CODECS.items():
            key = f"{name}/{codec_name}"
            try:
                model, opt = build(comm, algorithm, {**options, "codec": make()}, inner, batchnorm)
                got = train(comm, model, opt, 0, STEPS, schedule)
                diff = max(max_diff(g, w[comm.rank]) for g, w in zip(got, want))
                ratio = opt.comm_stats()["bytes"] / plain_opt.comm_stats()["bytes"]
                finite = all(bool(t.isfinite().all()) for t in got[-1])
                ok = finite and ratio <= BYTES_RATIO.get((name, codec_name), 0.85) and (codec_name != "int8" or diff <= INT8_TOL)
                results[key] = {"ok": ok, "max_diff": diff, "bytes_ratio": ratio, "finite": finite}
            except Exception:
                results[key] = {"ok": False, "error": traceback.format_exc()}
            failures += not results[key]["ok"]
            print(f"rank {comm.rank} {key}: {results[key]}", flush=True)
    report(out_dir, comm.rank, results)
    finish(failures)


if __name__ == "__main__":
    main()
