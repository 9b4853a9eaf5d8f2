"""CPU seconds per thread of a multi-process run, grouped by role: run a command (e.g. `mpirun ...`) and
sample /proc every 50 ms for its process tree's threads (utime + stime; the last sample of a thread that
exits stands for it), with the seconds each spent runnable but waiting for a core (schedstat's run
delay: on a busy machine, what the scheduler withheld) and alive (first to last sample: what is neither
is time the thread slept). Roles: the command itself, its children ("rank process": what mpirun starts) and
their descendants ("child process": e.g. LAP's Hogwild workers); threads by name within each (pycomm's
progress thread and Python's are named after the program, gloo's after gloo). Linux only.

    python -m benchmarks.thread_cpu [--json OUT] -- mpirun -n 2 python -m benchmarks.workers.algorithms_run OUT 4 lapsgd"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def children_of(pids: set[int]) -> set[int]:
    """Every live descendant of `pids`."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent[int(entry)] = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = set(), set(pids)
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def thread_cpu(pid: int) -> dict[tuple[int, str, bool], float]:
    """(tid, name, is main thread) -> CPU seconds, for one process's threads."""
    return {key: cpu for key, (cpu, _) in thread_times(pid).items()}


def thread_times(pid: int) -> dict[tuple[int, str, bool], tuple[float, float]]:
    """(tid, name, is main thread) -> (CPU seconds, seconds runnable waiting for a core), for one process's
    threads (the wait is 0 where the kernel keeps no schedstat)."""
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            try:
                wait = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                wait = 0.0
            out[(int(tid), name, int(tid) == pid)] = ((int(fields[11]) + int(fields[12])) / TICK, wait)
    except OSError:
        pass
    return out


def run(argv: list[str], interval: float = 0.05) -> list[dict[str, object]]:
    proc = subprocess.Popen(argv)
    last: dict[tuple[int, int, str, bool], tuple[float, float]] = {}
    seen: dict[tuple[int, int, str, bool], list[float]] = {}  # first and last sample's time
    role: dict[int, str] = {proc.pid: "command"}
    while proc.poll() is None:
        tree = children_of({proc.pid})
        for pid in tree:
            if pid not in role:
                role[pid] = (
                    "rank process"
                    if int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) == proc.pid
                    else "child process"
                )
        for pid in tree | {proc.pid}:
            now = time.monotonic()
            for (tid, name, main), times in thread_times(pid).items():
                last[(pid, tid, name, main)] = times
                seen.setdefault((pid, tid, name, main), [now, now])[1] = now
        time.sleep(interval)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {proc.returncode}")
    totals: collections.Counter = collections.Counter()
    waits: collections.Counter = collections.Counter()
    alive: collections.Counter = collections.Counter()
    processes: dict[str, set[int]] = collections.defaultdict(set)
    for key, (cpu, wait) in last.items():
        pid, _, name, main = key
        group = (role.get(pid, "child process"), "main thread" if main else f"thread {name!r}")
        totals[group] += cpu
        waits[group] += wait
        alive[group] += seen[key][1] - seen[key][0]
        processes[role.get(pid, "child process")].add(pid)
    return [
        {
            "role": r,
            "thread": t,
            "cpu_seconds": cpu,
            "runnable_wait_seconds": waits[(r, t)],
            "alive_seconds": alive[(r, t)],
            "processes": len(processes[r]),
        }
        for (r, t), cpu in totals.most_common()
    ]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ours, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else ([], argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(ours)
    if not command:
        ap.error("give the command to run after --")
    rows = run(command)
    for r in rows:
        print(
            f"{r['cpu_seconds']:8.2f} CPU-s {r['runnable_wait_seconds']:8.2f} wait-s "
            f"{r['alive_seconds']:8.2f} alive-s  {r['role']:14s} ({r['processes']})  {r['thread']}"
        )
    print(f"{sum(r['cpu_seconds'] for r in rows):8.2f} CPU-s  total")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
