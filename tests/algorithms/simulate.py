"""Independent single-process simulation of N workers for every update rule of ALGORITHMS.md.

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


def simulate(name: str, options: dict[str, Any], n: int, steps: int, inner: str, batchnorm: bool = False,
             schedule: bool = False) -> list[list[list[torch.Tensor]]]:
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


def qsr(sim: Simulation, o: dict[str, Any]):
    h_base, alpha, gamma = o["h_base"], o.get("alpha", 0.0175), o.get("gamma", 2.0)
    h_min, warmup, total = o.get("h_min", h_base), o.get("warmup_steps", 0), o.get("total_steps")
    next_round = [h_base]

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
        eta = sim.opts[0].param_groups[0]["lr"]
        if t < warmup or alpha == 0:
            h = h_base
        else:
            h = max(math.floor((alpha / eta) ** gamma), h_min)
            if total is not None:
                h = min(h, total - t)
            h = max(h, 1)
        next_round[0] = t + h
    return rule


def _local_pull(sim: Simulation, centres: list[list[torch.Tensor]], p: float) -> None:
    for i in range(sim.n):
        for x, c in zip(sim.x(i), centres[i]):
            x.copy_((1 - p) * x + p * c)


def easgd(sim: Simulation, o: dict[str, Any], plus: bool = False):
    tau, cs, p = o["comm_period"], o["dist_pulling_strength"], o["local_pulling_strength"] / o["comm_period"]
    c = [x.clone() for x in sim.x(0)]
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
                vs = [v[i][k] for i in range(sim.n)]
                v_sum = sum(vs)
                m_w = torch.where(v_sum > 0, sum(vj * xj for vj, xj in zip(vs, xs)) / v_sum, c_old)
                delta = cs * (m_w - c_old)
                c[k].add_(delta)
                for x in xs:
                    x.copy_((1 - cs) * (x + delta) + cs * c[k])
    return rule


def lsgd(sim: Simulation, o: dict[str, Any], plus: bool = False):
    tau, cs, p = o["comm_period"], o["dist_pulling_strength"], o["local_pulling_strength"] / o["comm_period"]
    window, metric = o.get("leader_window", 10), o.get("leader_metric", "loss")
    multi = o.get("multi_leader", False)
    centres = [[x.clone() for x in sim.x(i)] for i in range(sim.n)]   # per worker (lsgd) / shared (lsgd+)
    history: list[list[float]] = [[] for _ in range(sim.n)]
    proxy = [0.0] * sim.n   # SDTL's score: EMA from 0 of <x_prev - x_now, g>, x_now after the local pull

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
                        x.copy_(x - (cs if local_due else 0.0) * (x - xl)
                                - (o.get("global_pulling_strength", 0.1) if global_due else 0.0) * (x - xl))
                    else:
                        x.copy_((1 - strength) * x + strength * xl)
            for c, x in zip(centres[i], sim.x(i)):
                c.copy_(x)
    return rule


RULES = {
    "mbsgd": mbsgd, "plsgd": plsgd, "qsr": qsr, "easgd": easgd,
    "easgd+": lambda sim, o: easgd(sim, o, plus=True),
    "lsgd": lsgd, "lsgd+": lambda sim, o: lsgd(sim, o, plus=True),
}
