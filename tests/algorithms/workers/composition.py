"""Compositions on 4 real ranks against single-process references. argv: OUT_DIR.

pp2 x dp2: Pipeline(mesh=) with ZeRO 1/2/3 on the stages (over dp_shard, and zero2 over dp_replicate) and
mbsgd equal the unsplit model on the whole batch (synchronous: the replicas' gradients averaged); plsgd,
qsr, easgd, lsgd (the replica's loss) and diloco on the stages equal an N-worker simulation of the unsplit model
written here with plain torch (diloco: tests/algorithms/simulate.py's rule on these workers).
dp_shard2 x dp_replicate2: ZeRO inside each replica with plsgd, qsr (Adam's moments averaged too), easgd
and diloco (streaming, 2 fragments, over ZeRO-3; plain over ZeRO-2) across the replicas equal the same
simulation, each worker training on its shard ranks' rows; diloco given the mesh alone runs over
mesh["dp"] (the 4-worker simulation). Parameters compared every step (float64 models; ZeRO's masters are
fp32), to rtol 1e-5; bytes per mesh dimension against their formulas."""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import torch

import algorithms
import pycomm
from tests.algorithms import simulate
from tests.algorithms.pipeline_problem import BATCH, close, make_batch, make_model
from tests.algorithms.workers.common import run_cases, world

STEPS, M = 4, 2  # optimizer steps, micro-batches
H = 2  # the periodic methods' period
HIDDEN = 16  # the mlp's width at every cut
MASTER_ATOL = 5e-7  # fp32 masters: a rounding of ~6e-8 per step on weights of ~0.5 (measured 9e-8 after 4)
PERIODIC = {
    "plsgd": {"averaging_freq": H},
    "qsr": {"h_base": H, "alpha": 0.0, "avg_m": True},
    "easgd": {"comm_period": H, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
    "lsgd": {"comm_period": H, "dist_pulling_strength": 0.5, "leader_window": 2},
    "diloco": {"inner_steps": H, "outer_lr": 0.7, "outer_momentum": 0.9, "nesterov": True},
}
STREAMING = {**PERIODIC["diloco"], "fragments": 2}  # fragment 1's rounds at steps 1, 3; fragment 0's at 2, 4


def inner(kind: str, params: Any) -> torch.optim.Optimizer:
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=1e-2)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def inner_kind(method: str) -> str:
    return "adamw" if method in ("qsr", "diloco") else "sgd"


def fp32_state(method: str) -> bool:
    """Whether the method holds the float64 model's values in fp32 (ZeRO's masters, DiLoCo's global copy)."""
    return method.startswith("zero") or method == "diloco"


# -- the references: plain torch, one process ------------------------------------------------------------
class Workers:
    """N copies of the unsplit model from seed 1, worker w training on rows [w B/N, (w+1) B/N) of each
    step's batch; `rule(step)` applies the method's communication after every worker stepped."""

    def __init__(self, n: int, method: str, options: Optional[dict[str, Any]] = None) -> None:
        base = make_model("mlp", seed=1)
        self.n, self.method = n, method
        self.models = [copy.deepcopy(base) for _ in range(n)]
        self.opts = [inner(inner_kind(method), m.parameters()) for m in self.models]
        self.centre = [p.detach().clone() for p in base.parameters()]
        self.window: list[list[float]] = [[] for _ in range(n)]
        # DiLoCo: the independent N-worker simulation's rule (tests/algorithms/simulate.py), on these workers
        self.diloco = simulate.diloco(self, options or PERIODIC["diloco"]) if method == "diloco" else None

    def x(self, w: int) -> list[torch.Tensor]:
        return [p.data for p in self.models[w].parameters()]

    def float_buffers(self, w: int) -> list[torch.Tensor]:
        return [b for b in self.models[w].buffers() if b.is_floating_point()]

    def step_all(self) -> None:
        for o in self.opts:
            o.step()

    def step(self, t: int) -> None:
        x, y, loss_fn = make_batch("mlp", t)
        rows = BATCH // self.n
        for w, (m, o) in enumerate(zip(self.models, self.opts)):
            o.zero_grad()
            loss = loss_fn(m(x[w * rows : (w + 1) * rows]), y[w * rows : (w + 1) * rows])
            loss.backward()
            self.window[w] = (self.window[w] + [loss.item()])[-PERIODIC["lsgd"]["leader_window"] :]
        with torch.no_grad():
            if self.diloco is not None:  # its rule steps the inner optimizers itself
                self.diloco(t + 1, [])
                return
            self.step_all()
            self._communicate(t + 1)

    def _communicate(self, taken: int) -> None:
        due = taken % H == 0
        if self.method in ("plsgd", "qsr") and due:
            self.average([self.x(w) for w in range(self.n)])
            if self.method == "qsr":  # avg_m: Adam's first moments too
                self.average([[o.state[p]["exp_avg"] for p in m.parameters()] for m, o in zip(self.models, self.opts)])
        elif self.method == "easgd":
            o = PERIODIC["easgd"]
            p_local = o["local_pulling_strength"] / o["comm_period"]
            for w in range(self.n):  # local pull toward the centre every step
                for x, c in zip(self.x(w), self.centre):
                    x.mul_(1 - p_local).add_(c, alpha=p_local)
            if due:
                c_s = o["dist_pulling_strength"]
                mean = [torch.stack(ts).mean(0) for ts in zip(*[self.x(w) for w in range(self.n)])]
                for w in range(self.n):
                    for x, c in zip(self.x(w), self.centre):
                        x.mul_(1 - c_s / self.n).add_(c, alpha=c_s / self.n)
                for c, mu in zip(self.centre, mean):
                    c.mul_(1 - c_s).add_(mu, alpha=c_s)
        elif self.method == "lsgd" and due:
            c_s = PERIODIC["lsgd"]["dist_pulling_strength"]
            scores = [sum(win) / len(win) for win in self.window]
            leader = min(range(self.n), key=lambda w: (scores[w], w))
            x_l = [t.clone() for t in self.x(leader)]
            for w in range(self.n):
                if w != leader:
                    for x, xl in zip(self.x(w), x_l):
                        x.mul_(1 - c_s).add_(xl, alpha=c_s)

    @staticmethod
    def average(per_worker: list[list[torch.Tensor]]) -> None:
        for ts in zip(*per_worker):
            mean = torch.stack(ts).mean(0)
            for t in ts:
                t.copy_(mean)


def synchronous_reference(method: str) -> list[dict[str, torch.Tensor]]:
    """The unsplit model on the whole batch (= the replicas' gradients averaged): parameters per step."""
    sim = Workers(1, method)
    out = []
    for t in range(STEPS):
        sim.step(t)
        out.append({n: p.detach().clone() for n, p in sim.models[0].named_parameters()})
    return out


def periodic_reference(
    method: str, n: int, options: Optional[dict[str, Any]] = None
) -> list[list[dict[str, torch.Tensor]]]:
    sim = Workers(n, method, options)
    out = []
    for t in range(STEPS):
        sim.step(t)
        out.append([{name: p.detach().clone() for name, p in m.named_parameters()} for m in sim.models])
    return out


# -- the runs ------------------------------------------------------------------------------------------
def rows(t: torch.Tensor, index: int, count: int) -> torch.Tensor:
    return t.chunk(count)[index]


def current(opt: Any, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """This rank's parameters (ZeRO-3's are empty between steps: gathered from the shards)."""
    if hasattr(opt, "full_model_state_dict"):
        return {n: v for n, v in opt.full_model_state_dict().items() if n in dict(module.named_parameters())}
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def compare(mine: dict[str, torch.Tensor], want: dict[str, torch.Tensor], step: int, fp32_masters: bool) -> list[str]:
    """Equal to rtol 1e-5; where ZeRO holds fp32 masters of the float64 model, also within MASTER_ATOL."""
    if not fp32_masters:
        return [f"step {step} {n}" for n, v in mine.items() if not close(v.double(), want[n])]
    return [
        f"step {step} {n}"
        for n, v in mine.items()
        if not torch.allclose(v.double(), want[n], rtol=1e-5, atol=MASTER_ATOL)
    ]


def pipeline_case(method: str, replicate: bool, zero_inside: bool = False) -> Callable[[], dict[str, Any]]:
    """pp2 x dp2 (dp_replicate=2 with `replicate`, else dp_shard=2): Pipeline over pp, `method` on the
    stages over its dimension; every rank's stage parameters against the reference after every step."""

    def run() -> dict[str, Any]:
        comm = world()
        mesh = pycomm.Mesh(comm, pp=2, dp_replicate=2 if replicate else 1, dp_shard=1 if replicate else 2)
        replica = mesh["dp"].rank
        model = make_model("mlp", seed=1 + replica)  # replicas start apart: wrapping broadcasts replica 0's
        pipe = algorithms.Pipeline(model, mesh=mesh, schedule="1f1b", microbatches=M, split=[4])
        opt = algorithms.CommOptimizer(
            inner(inner_kind(method), pipe.stage_module.parameters()),
            algorithm=method,
            mesh=mesh,
            model=pipe.stage_module,
            **PERIODIC.get(method, {}),
        )
        synchronous = method.startswith("zero") or method == "mbsgd"
        want = synchronous_reference(method) if synchronous else periodic_reference(method, 2)
        bad: list[str] = []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad()
            pipe.train_step(
                rows(x, replica, 2) if pipe.is_first else None,
                rows(y, replica, 2) if pipe.is_last else None,
                loss_fn if pipe.is_last else None,
            )
            opt.step(loss=pipe.replica_loss)
            bad += compare(
                current(opt, pipe.stage_module), want[t] if synchronous else want[t][replica], t, fp32_state(method)
            )
        res: dict[str, Any] = {"ok": not bad, "bad": bad[:4], "stage": pipe.stage}
        # bytes: the pipeline's activations (stage 0) / their gradients and the loss (stage 1), and ZeRO-2/3's
        # reduce-scatter (fp32 wire) and all-gather (fp32 masters as float64 parameters) over dp_shard
        pp = pipe.comm_stats()["bytes_by_dim"]["pp"]
        boundary = STEPS * (BATCH // 2) * HIDDEN * 8
        res["pp_bytes"] = pp
        res["ok"] &= pp == boundary + (STEPS * 8 if pipe.stage == 1 else 0)
        # the optimizer claimed the stage's gradients: the pipeline all-reduced only the loss over dp
        res["ok"] &= pipe.comm_stats()["bytes_by_dim"]["dp"] == STEPS * 8
        # zero3 too: a Pipeline keeps its units gathered across the micro-batches, one all-gather per step
        if method in ("zero2", "zero3") and not replicate:
            numel = sum(g.total for g in opt.groups)  # zero3's parameters are empty between steps
            shards = sum(g.shard_numel for g in opt.groups)
            expected = STEPS * (numel * 4 + shards * 8)
            got = opt.comm_stats()["bytes_by_dim"]["dp_shard"]
            res.update(dp_shard_bytes=got, expected_dp_shard_bytes=expected)
            res["ok"] &= got == expected
        return res

    return run


def across_case(zero: str, method: str, options: Optional[dict[str, Any]] = None) -> Callable[[], dict[str, Any]]:
    """dp_shard2 x dp_replicate2: `zero` inside each replica, `method` across the replicas over its master
    shards; worker w of the simulation is replica w training on its two shard ranks' rows."""
    options = options or PERIODIC[method]

    def run() -> dict[str, Any]:
        comm = world()
        mesh = pycomm.Mesh(comm, dp_replicate=2, dp_shard=2)
        model = make_model("mlp", seed=1 + comm.rank)
        opt = algorithms.CommOptimizer(
            inner(inner_kind(method), model.parameters()), algorithm=zero, mesh=mesh, model=model
        )
        opt = algorithms.CommOptimizer(opt, algorithm=method, mesh=mesh, model=model, **options)
        want = periodic_reference(method, 2, options)
        replica, dp = mesh.coords["dp_replicate"], mesh["dp"]
        bad: list[str] = []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad()
            loss = loss_fn(model(rows(x, dp.rank, 4)), rows(y, dp.rank, 4))
            loss.backward()
            opt.step(loss=loss)
            bad += compare(current(opt, model), want[t][replica], t, True)
        by_dim = opt.comm_stats()["bytes_by_dim"]
        return {
            "ok": not bad and by_dim["dp_replicate"] > 0 and by_dim["dp_shard"] > 0,
            "bad": bad[:4],
            "bytes_by_dim": by_dim,
        }

    return run


def mesh_case(method: str) -> Callable[[], dict[str, Any]]:
    """A data-parallel method given mesh= (dp_replicate2 x dp_shard2) runs over mesh["dp"], all 4 ranks:
    the 4-worker simulation, worker w on dp rank w's rows."""

    def run() -> dict[str, Any]:
        mesh = pycomm.Mesh(world(), dp_replicate=2, dp_shard=2)
        model = make_model("mlp", seed=1 + mesh["dp"].rank)
        opt = algorithms.CommOptimizer(
            inner(inner_kind(method), model.parameters()), algorithm=method, mesh=mesh, model=model, **PERIODIC[method]
        )
        want = periodic_reference(method, 4)
        bad: list[str] = []
        for t in range(STEPS):
            x, y, loss_fn = make_batch("mlp", t)
            opt.zero_grad()
            loss = loss_fn(model(rows(x, mesh["dp"].rank, 4)), rows(y, mesh["dp"].rank, 4))
            loss.backward()
            opt.step(loss=loss)
            bad += compare(current(opt, model), want[t][mesh["dp"].rank], t, fp32_state(method))
        by_dim = opt.comm_stats()["bytes_by_dim"]
        return {
            "ok": not bad and opt.comm is mesh["dp"] and set(by_dim) == {"dp"} and by_dim["dp"] > 0,
            "bad": bad[:4],
            "bytes_by_dim": by_dim,
        }

    return run


def refused(make: Callable[[], Any], words: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        try:
            make()
        except ValueError as e:
            return {"ok": words in str(e), "message": str(e)}
        return {"ok": False, "message": "no error"}

    return run


def unsupported() -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    def zero_then(method: str, **options: Any) -> Callable[[], Any]:
        def make() -> Any:
            mesh = pycomm.Mesh(world(), dp_replicate=2, dp_shard=2)
            model = make_model("mlp", 1)
            opt = algorithms.CommOptimizer(inner("sgd", model.parameters()), algorithm="zero2", mesh=mesh, model=model)
            return algorithms.CommOptimizer(opt, algorithm=method, mesh=mesh, model=model, **options)

        return make

    def pipelined(method: str, **options: Any) -> Callable[[], Any]:
        def make() -> Any:
            mesh = pycomm.Mesh(world(), pp=2, dp_replicate=2)
            pipe = algorithms.Pipeline(make_model("mlp", 1), mesh=mesh, microbatches=M)
            return algorithms.CommOptimizer(
                inner("sgd", pipe.stage_module.parameters()),
                algorithm=method,
                mesh=mesh,
                model=pipe.stage_module,
                **options,
            )

        return make

    return [
        ("refuse_mbsgd_over_zero2", refused(zero_then("mbsgd"), "mbsgd over zero2")),
        ("refuse_lsgd_over_zero2", refused(zero_then("lsgd"), "lsgd over zero2")),
        ("refuse_pipeline_lsgd_proxy", refused(pipelined("lsgd", leader_metric="proxy"), "pipeline x lsgd")),
        ("refuse_pipeline_lapsgd", refused(pipelined("lapsgd"), "pipeline x lapsgd")),
    ]


def main() -> None:
    comm = world()
    cases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    for zero in ("zero1", "zero2", "zero3"):
        cases.append((f"pp_{zero}", pipeline_case(zero, replicate=False)))
    cases.append(("pp_zero2_replicate", pipeline_case("zero2", replicate=True)))
    for method in ("mbsgd", "plsgd", "qsr", "easgd", "lsgd", "diloco"):
        cases.append((f"pp_{method}", pipeline_case(method, replicate=True)))
    for method in ("plsgd", "qsr", "easgd"):
        cases.append((f"zero3_{method}", across_case("zero3", method)))
    cases += [
        ("zero1_plsgd", across_case("zero1", "plsgd")),
        ("zero2_plsgd", across_case("zero2", "plsgd")),
        ("zero3_diloco_streaming", across_case("zero3", "diloco", STREAMING)),
        ("zero2_diloco", across_case("zero2", "diloco")),
        ("mesh_diloco", mesh_case("diloco")),
    ]
    cases += unsupported()
    run_cases(comm, cases)


if __name__ == "__main__":
    main()
