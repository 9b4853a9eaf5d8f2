"""Independent single-process simulation of N workers for every update rule of docs/algorithms.md.

Written from the rules' text with plain torch (no pycomm, no algorithms.* except the LARS optimizer
that some configurations wrap), so that the real multi-rank runs can be compared against it."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from tests.algorithms.problem import loss_on, lr_at, make_inner, make_model


def _mean(ts: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(ts).mean(0)


class Simulation:
    """N model copies starting from rank 0's initial model, each with its own inner optimizer."""

    def __init__(self, n: int, inner: str, batchnorm: bool = False, schedule: bool = False) -> None:
        base = make_model(seed=1, batchnorm=batchnorm)
        self.n, self.schedule = n, schedule
        self.models = [copy.deepcopy(base) for _ in range(n)]
        self.opts = [make_inner(inner, m.parameters()) for m in self.models]
        self.base_lr = self.opts[0].param_groups[0]["lr"]

    def x(self, i: int) -> list[torch.Tensor]:
        return [p.data for p in self.models[i].parameters()]

    def grads(self, i: int) -> list[torch.Tensor]:
        return [p.grad for p in self.models[i].parameters()]

    def float_buffers(self, i: int) -> list[torch.Tensor]:
        return [b for b in self.models[i].buffers() if b.is_floating_point()]

    def backward(self, step: int) -> list[float]:
        if self.schedule:
            for o in self.opts:
                for g in o.param_groups:
                    g["lr"] = lr_at(step, self.base_lr)
        losses = []
        for i, (m, o) in enumerate(zip(self.models, self.opts)):
            o.zero_grad()
            loss = loss_on(m, i, step)
            loss.backward()
            losses.append(loss.item())
        return losses

    def step_all(self) -> None:
        for o in self.opts:
            o.step()

    def snapshot(self) -> list[list[torch.Tensor]]:
        return [[t.detach().clone() for t in m.state_dict().values()] for m in self.models]

    def average(self, per_worker: list[list[torch.Tensor]]) -> None:
        for k in range(len(per_worker[0])):
            avg = _mean([w[k] for w in per_worker])
            for w in per_worker:
                w[k].copy_(avg)


def simulate(
    name: str, options: dict[str, Any], n: int, steps: int, inner: str, batchnorm: bool = False, schedule: bool = False
) -> list[list[list[torch.Tensor]]]:
    """trajectory[step][worker] = the worker's state_dict values after that step."""
    sim = Simulation(n, inner, batchnorm, schedule)
    rule = RULES[name](sim, options)
    out = []
    with torch.no_grad():
        for t in range(steps):
            with torch.enable_grad():
                losses = sim.backward(t)
            rule(t + 1, losses)
            out.append(sim.snapshot())
    return out


def mbsgd(sim: Simulation, o: dict[str, Any]):
    def rule(t: int, losses: list[float]) -> None:
        for k in range(len(sim.grads(0))):
            g = _mean([sim.grads(i)[k] for i in range(sim.n)])
            for i in range(sim.n):
                sim.grads(i)[k].copy_(g)
        sim.step_all()

    return rule


def plsgd(sim: Simulation, o: dict[str, Any]):
    last = [0]

    def rule(t: int, losses: list[float]) -> None:
        sim.step_all()
        if t <= o.get("pre_post_steps", 0) or t - last[0] == o["averaging_freq"]:
            sim.average([sim.x(i) + sim.float_buffers(i) for i in range(sim.n)])
            last[0] = t

    return rule


def qsr_period(sim: Simulation, o: dict[str, Any], t: int) -> int:
    """QSR's H chosen with t steps taken, from the rate of step t + 1 (0-based index t)."""
    h_base, alpha, gamma = o["h_base"], o.get("alpha", 0.0175), o.get("gamma", 2.0)
    h_min, warmup, total = o.get("h_min", h_base), o.get("warmup_steps", 0), o.get("total_steps")
    if t < warmup or alpha == 0:
        return h_base
    eta = lr_at(t, sim.base_lr) if sim.schedule else sim.base_lr
    h = max(math.floor((alpha / eta) ** gamma), h_min)
    if total is not None:
        h = min(h, total - t)
    return max(h, 1)


def qsr(sim: Simulation, o: dict[str, Any]):
    next_round = [qsr_period(sim, o, 0)]

    def rule(t: int, losses: list[float]) -> None:
        sim.step_all()
        if t != next_round[0]:
            return
        tensors = []
        for i in range(sim.n):
            tensors.append(sim.x(i))
            for key, on in (("exp_avg", o.get("avg_m")), ("exp_avg_sq", o.get("avg_v"))):
                if on:
                    tensors[-1] = tensors[-1] + [sim.opts[i].state[p][key] for p in sim.models[i].parameters()]
        sim.average(tensors)
        next_round[0] = t + qsr_period(sim, o, t)

    return rule


def diloco(sim: Simulation, o: dict[str, Any]):
    """docs/algorithms.md's DiLoCo / Streaming DiLoCo: fragment f (layers f, f+F, ... of the model's children)
    starts a round at the steps t with t mod H = f*H/F (QSR: its own clock); Delta = mean_i (X - x_i) then,
    applied tau steps later: outer step on X, x_i <- alpha x_i + (1 - alpha) X. Buffers averaged at
    fragment 0's round starts."""
    count, tau, alpha = o.get("fragments", 1), o.get("sync_delay", 0), o.get("mixing", 0.0)
    lr, mu, nesterov = o.get("outer_lr", 0.7), o.get("outer_momentum", 0.9), o.get("nesterov", True)
    sizes = [len(list(c.parameters())) for c in sim.models[0].children()]
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    layers = [list(range(s0, s0 + n)) for s0, n in zip(starts, sizes) if n]
    frags = [[i for layer in layers[f::count] for i in layer] for f in range(count)]
    X = [x.clone() for x in sim.x(0)]
    buf: dict[int, torch.Tensor] = {}
    adam = None
    if o.get("outer_optimizer") is not None:  # a torch optimizer class by name, e.g. "Adam", lr only
        X = [x.requires_grad_() for x in X]
        adam = [getattr(torch.optim, o["outer_optimizer"])([X[i] for i in frag], lr=lr) for frag in frags]
    qsr_mode = o.get("inner_steps") == "qsr"
    clock: list[dict[str, Any]] = [{"next": None, "last": None} for _ in frags]
    flight: dict[int, tuple[int, list[torch.Tensor]]] = {}  # fragment -> (apply at, Delta)

    def outer_step(f: int, delta: list[torch.Tensor]) -> None:
        if adam is not None:
            for i, d in zip(frags[f], delta):
                X[i].grad = d.clone()
            adam[f].step()
            return
        for i, d in zip(frags[f], delta):
            g = d
            if mu:
                buf[i] = g.clone() if i not in buf else mu * buf[i] + g
                g = g + mu * buf[i] if nesterov else buf[i]
            X[i].sub_(lr * g)

    def apply(f: int, delta: list[torch.Tensor]) -> None:
        outer_step(f, delta)
        for i in range(sim.n):
            for k in frags[f]:
                x = sim.x(i)[k]
                x.copy_(alpha * x + (1 - alpha) * X[k].detach() if alpha else X[k].detach())

    def rule(t: int, losses: list[float]) -> None:
        if qsr_mode:  # each clock without a next round gets one from the period starting now (t - 1 taken)
            h = qsr_period(sim, o, t - 1)
            for f, c in enumerate(clock):
                if c["next"] is None:
                    c["next"] = ((f * h) // count or h) if c["last"] is None else c["last"] + max(h, tau + 1)
        sim.step_all()
        for f in sorted(f for f, (due, _) in flight.items() if due == t):
            apply(f, flight.pop(f)[1])
        for f in range(count):
            due = clock[f]["next"] == t if qsr_mode else t % o["inner_steps"] == (f * o["inner_steps"]) // count
            if not due:
                continue
            if f == 0:
                sim.average([sim.float_buffers(i) for i in range(sim.n)])
            delta = [_mean([X[k].detach() - sim.x(i)[k] for i in range(sim.n)]) for k in frags[f]]
            flight[f] = (t + tau, delta)
            clock[f] = {"next": None, "last": t}
            if tau == 0:
                apply(f, flight.pop(f)[1])

    return rule


def _local_pull(sim: Simulation, centres: list[list[torch.Tensor]], p: float) -> None:
    for i in range(sim.n):
        for x, c in zip(sim.x(i), centres[i]):
            x.copy_((1 - p) * x + p * c)


def easgd(sim: Simulation, o: dict[str, Any], plus: bool = False):
    tau, cs, p = o["comm_period"], o["dist_pulling_strength"], o["local_pulling_strength"] / o["comm_period"]
    c = [x.clone() for x in sim.x(0)]
    # easgd+: the c a round starts from is the mean of the workers right after the previous round
    restart = [x.clone() for x in sim.x(0)]
    v = [[torch.zeros_like(x) for x in sim.x(i)] for i in range(sim.n)]

    def rule(t: int, losses: list[float]) -> None:
        for i in range(sim.n):
            for vk, g in zip(v[i], sim.grads(i)):
                vk.copy_(0.9 * vk + 0.1 * g * g)
        sim.step_all()
        _local_pull(sim, [c] * sim.n, p)
        if t % tau:
            return
        for k in range(len(c)):
            xs = [sim.x(i)[k] for i in range(sim.n)]
            c_old = c[k].clone()
            if not plus:
                m = _mean(xs)
                a = cs / sim.n
                for x in xs:
                    x.copy_((1 - a) * x + a * c_old)
                c[k].copy_((1 - cs) * c_old + cs * m)
            else:
                c_start = restart[k]
                vs = [v[i][k] for i in range(sim.n)]
                v_sum = sum(vs)
                m_w = torch.where(v_sum > 0, sum(vj * xj for vj, xj in zip(vs, xs)) / v_sum, c_start)
                delta = cs * (m_w - c_start)
                c[k].copy_(c_start + delta)
                for x in xs:
                    x.copy_((1 - cs) * (x + delta) + cs * c[k])
                restart[k] = _mean(xs)

    return rule


def lsgd(sim: Simulation, o: dict[str, Any], plus: bool = False):
    tau, cs, p = o["comm_period"], o["dist_pulling_strength"], o["local_pulling_strength"] / o["comm_period"]
    window, metric = o.get("leader_window", 10), o.get("leader_metric", "loss")
    multi = o.get("multi_leader", False)
    centres = [[x.clone() for x in sim.x(i)] for i in range(sim.n)]  # per worker (lsgd) / shared (lsgd+)
    history: list[list[float]] = [[] for _ in range(sim.n)]
    proxy = [0.0] * sim.n  # SDTL's score: EMA from 0 of <x_prev - x_now, g>, x_now after the local pull

    def rule(t: int, losses: list[float]) -> None:
        before = [[x.clone() for x in sim.x(i)] for i in range(sim.n)]
        sim.step_all()
        for i in range(sim.n):
            history[i].append(losses[i])
        _local_pull(sim, centres, p)
        for i in range(sim.n):
            inner = sum(float(torch.sum((b - x) * g)) for b, x, g in zip(before[i], sim.x(i), sim.grads(i)))
            proxy[i] = 0.9 * proxy[i] + 0.1 * inner
        local_due = t % tau == 0
        global_due = multi and t % o.get("global_period", 16) == 0
        if not (local_due or global_due):
            return
        scores = [sum(h[-window:]) / len(h[-window:]) for h in history] if metric == "loss" else list(proxy)
        leader = min(range(sim.n), key=lambda r: (scores[r], r))
        x_l = [x.clone() for x in sim.x(leader)]
        if plus:
            for k in range(len(x_l)):
                m = _mean([sim.x(i)[k] for i in range(sim.n)])
                delta = cs * (x_l[k] - m)
                c = m + delta
                for i in range(sim.n):
                    x = sim.x(i)[k]
                    x.copy_((1 - cs) * (x + delta) + cs * c)
                    centres[i][k].copy_(c)
            return
        # one node: the local leader is the global leader; due pulls add up (multi-leader formula)
        strength = (cs if local_due else 0.0) + (o.get("global_pulling_strength", 0.1) if global_due else 0.0)
        for i in range(sim.n):
            if i != leader:
                for x, xl in zip(sim.x(i), x_l):
                    if multi:
                        x.copy_(
                            x
                            - (cs if local_due else 0.0) * (x - xl)
                            - (o.get("global_pulling_strength", 0.1) if global_due else 0.0) * (x - xl)
                        )
                    else:
                        x.copy_((1 - strength) * x + strength * xl)
            for c, x in zip(centres[i], sim.x(i)):
                c.copy_(x)

    return rule


RULES = {
    "mbsgd": mbsgd,
    "plsgd": plsgd,
    "qsr": qsr,
    "easgd": easgd,
    "easgd+": lambda sim, o: easgd(sim, o, plus=True),
    "lsgd": lsgd,
    "lsgd+": lambda sim, o: lsgd(sim, o, plus=True),
    "diloco": diloco,
}
