"""The bubble of an executed schedule, counted in time slots: each stage's forwards and backwards, in the
order the stages actually ran them, replayed with one slot per forward or backward, a forward of
micro-batch i starting no earlier than the previous stage's forward of i ended and a backward no earlier
than the next stage's backward of i ended. bubble = idle slots / (stages x makespan), which is
(p - 1) / (m + p - 1) for a correct GPipe or 1F1B run ((p - 1) / (v m + p - 1) interleaved, a
slot being one chunk's forward or backward); a wrong order (a stage waiting on work queued
behind its own) shows as a larger bubble. Independent of wall-clock noise, hence testable."""

from __future__ import annotations

from typing import Sequence

from algorithms.pipeline.pipeline_schedules import Action, B, F

CHUNK = 1 << 20  # codes: chunk * CHUNK + micro-batch + 1, negative for a backward


def encode(executed: Sequence[Action]) -> list[float]:
    """An executed order as numbers for a collective."""
    return [float((a.chunk * CHUNK + a.mb + 1) * (1 if a.kind == F else -1)) for a in executed]


def decode(codes: Sequence[float]) -> list[Action]:
    out = []
    for c in codes:
        n = int(abs(c)) - 1
        out.append(Action(F if c > 0 else B, n % CHUNK, n // CHUNK))
    return out


def _dependency(a: Action, s: int, p: int, chunks: int) -> tuple[int, Action] | None:
    """(stage, action) whose end `a` on stage s waits for: the previous global chunk's forward of the same
    micro-batch, or the next global chunk's backward (global chunk g = chunk * p + stage)."""
    g = a.chunk * p + s
    if a.kind == F and g > 0:
        return (g - 1) % p, Action(F, a.mb, (g - 1) // p)
    if a.kind == B and g < p * chunks - 1:
        return (g + 1) % p, Action(B, a.mb, (g + 1) // p)
    return None


def slot_ends(orders: Sequence[Sequence[Action]]) -> list[list[int]]:
    """End slot of every action of every stage (replayed as described above)."""
    p = len(orders)
    chunks = 1 + max((a.chunk for o in orders for a in o), default=0)
    end: dict[tuple[int, Action], int] = {}
    ends: list[list[int]] = [[] for _ in range(p)]
    pos, clock = [0] * p, [0] * p
    while any(pos[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                a = orders[s][pos[s]]
                dep = _dependency(a, s, p, chunks)
                if dep is not None and dep not in end:
                    break
                start = max(clock[s], end[dep] if dep is not None else 0)
                clock[s] = end[(s, a)] = start + 1
                ends[s].append(clock[s])
                pos[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"Pipeline: the executed orders cannot be replayed (a cycle): {orders}")
    return ends


def slot_bubble(orders: Sequence[Sequence[Action]]) -> float:
    """Idle fraction of stages x makespan slots."""
    ends = slot_ends(orders)
    makespan = max((e[-1] for e in ends if e), default=0)
    busy = sum(len(o) for o in orders)
    return 1.0 - busy / (len(orders) * makespan) if makespan else 0.0


def expected_bubble(stages: int, microbatches: int, chunks: int = 1) -> float:
    return (stages - 1) / (chunks * microbatches + stages - 1)
