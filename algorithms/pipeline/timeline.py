"""The bubble of an executed schedule, counted in time slots: each stage's forwards and backwards, in the
order the stages actually ran them, replayed with one slot per forward or backward, a forward of
micro-batch i starting no earlier than the previous stage's forward of i ended and a backward no earlier
than the next stage's backward of i ended. bubble = idle slots / (stages x makespan), which is
(p - 1) / (m + p - 1) for a correct GPipe or 1F1B run; a wrong order (a stage waiting on work queued
behind its own) shows as a larger bubble. Independent of wall-clock noise, hence testable."""
from __future__ import annotations

from typing import Sequence

from algorithms.pipeline.action_lists import B, F, Action


def encode(executed: Sequence[Action]) -> list[float]:
    """F i -> i + 1, B i -> -(i + 1): an executed order as numbers for a collective."""
    return [a.mb + 1.0 if a.kind == F else -(a.mb + 1.0) for a in executed]


def decode(codes: Sequence[float]) -> list[Action]:
    return [Action(F, int(c) - 1) if c > 0 else Action(B, int(-c) - 1) for c in codes]


def slot_ends(orders: Sequence[Sequence[Action]]) -> list[list[int]]:
    """End slot of every action of every stage (replayed as described above)."""
    p = len(orders)
    end: dict[tuple[int, Action], int] = {}
    ends: list[list[int]] = [[] for _ in range(p)]
    pos, clock = [0] * p, [0] * p
    while any(pos[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                a = orders[s][pos[s]]
                dep = (s - 1, a) if a.kind == F and s > 0 else (s + 1, a) if a.kind == B and s < p - 1 else None
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


def expected_bubble(stages: int, microbatches: int) -> float:
    return (stages - 1) / (microbatches + stages - 1)
