"""Pipeline schedules as explicit per-stage action lists, which the executor runs as written.

Actions on micro-batch i of a model chunk (the stage's only chunk, 0, except with interleaved 1F1B):
RECV_F (post the receive of its input activation), F (forward; waits for that input), SEND_F (its
output to the next stage), RECV_B (post the receive of its output's gradient), B (backward; waits for
that gradient), SEND_B (its input's gradient to the previous stage). The receives
are placed one compute action ahead of the F/B that consumes them, so they are in flight while this
stage computes and a pending receive never stands in front of compute. The first stage has no RECV_F
and SEND_B, the last no SEND_F and RECV_B (it starts backward from the loss).

- gpipe: all m forwards, then all m backwards (in micro-batch order). Holds m activations.
- 1f1b:  stage s runs min(p - s - 1, m) warm-up forwards, then alternates one forward and one backward,
  then cools down with the remaining backwards. Holds at most min(p - s, m) activations.
Both have the bubble (p - 1) / (m + p - 1) when a forward and a backward take one time slot each; any m
>= 1 works, also fewer micro-batches than stages.
- interleaved_1f1b (Megatron-LM's): the model is cut into p x v chunks, global chunk g on stage g % p
  as its local chunk g // p; 1F1B over (micro-batch, chunk) pairs taken p micro-batches at a time,
  with (p - s - 1) * 2 + (v - 1) * p warm-up forwards. Bubble (p - 1) / (v m + p - 1): the
  1F1B bubble divided by about v, for more messages and more live activations (v m on stage 0 at most,
  (p - s - 1) * 2 + (v - 1) * p + 1 chunk activations). Needs m to be a multiple of p."""

from __future__ import annotations

from typing import NamedTuple

RECV_F, F, SEND_F, RECV_B, B, SEND_B = "recv_f", "f", "send_f", "recv_b", "b", "send_b"
SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")


class Action(NamedTuple):
    kind: str
    mb: int
    chunk: int = 0

    def __repr__(self) -> str:
        return f"{self.kind}{self.mb}" + (f".{self.chunk}" if self.chunk else "")


def _interleaved(stage: int, stages: int, microbatches: int, chunks: int) -> list[Action]:
    p, v, total = stages, chunks, microbatches * chunks

    def nth(kind: str, k: int) -> Action:  # the k-th forward (backward) of this stage
        within = k % (p * v)
        chunk = within // p if kind == F else v - 1 - within // p
        return Action(kind, (k // (p * v)) * p + within % p, chunk)

    warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    order = [nth(F, k) for k in range(warmup)]
    for i in range(total - warmup):
        order += [nth(F, warmup + i), nth(B, i)]
    return order + [nth(B, i) for i in range(total - warmup, total)]


def compute_order(schedule: str, stage: int, stages: int, microbatches: int, chunks: int = 1) -> list[Action]:
    """The F/B actions of `stage` in the order the schedule runs them."""
    m = microbatches
    if schedule == "interleaved_1f1b":
        return _interleaved(stage, stages, m, chunks)
    if schedule == "gpipe":
        return [Action(F, i) for i in range(m)] + [Action(B, i) for i in range(m)]
    if schedule == "1f1b":
        warmup = min(stages - stage - 1, m)
        order = [Action(F, i) for i in range(warmup)]
        for i in range(m - warmup):  # steady state: one forward, then the oldest backward
            order += [Action(F, warmup + i), Action(B, i)]
        order += [Action(B, i) for i in range(m - warmup, m)]
        return order
    raise ValueError(f"Pipeline: schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")


def action_list(schedule: str, stage: int, stages: int, microbatches: int, chunks: int = 1) -> list[Action]:
    """Every action of `stage`: the compute order with its sends, and each receive posted one compute
    action before the F/B that waits for it (the first one up front)."""
    order = compute_order(schedule, stage, stages, microbatches, chunks)
    last_chunk = stages * chunks - 1

    def first(a: Action) -> bool:  # global chunk 0 (reads x)
        return a.chunk * stages + stage == 0

    def last(a: Action) -> bool:  # the last global chunk (computes the loss)
        return a.chunk * stages + stage == last_chunk

    def recv_for(a: Action) -> list[Action]:
        if a.kind == F and not first(a):
            return [Action(RECV_F, a.mb, a.chunk)]
        if a.kind == B and not last(a):
            return [Action(RECV_B, a.mb, a.chunk)]
        return []

    actions: list[Action] = recv_for(order[0]) if order else []
    for k, a in enumerate(order):
        if k + 1 < len(order):
            actions += recv_for(order[k + 1])  # the next input is on its way while this one computes
        actions.append(a)
        if a.kind == F and not last(a):
            actions.append(Action(SEND_F, a.mb, a.chunk))
        if a.kind == B and not first(a):
            actions.append(Action(SEND_B, a.mb, a.chunk))
    return actions
