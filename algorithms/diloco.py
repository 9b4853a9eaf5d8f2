"""DiLoCo and Streaming DiLoCo (Douillard et al., 2023; 2025), with any pycomm codec on the outer
gradients and QSR's learning-rate-driven period.

Every rank keeps its local parameters x (stepped by the wrapped, inner optimizer: AdamW in the papers)
and the global copy X (fp32, identical on every rank). A round of fragment f, at the step its clock
names:
    Delta_f = mean over ranks of (X_f - x_f)      one all-reduce AVG of the fragment's pseudo-gradient, through
                                                  the codec when one is set (error feedback per rank)
    X_f <- outer optimizer step on X_f with gradient Delta_f   (SGD lr 0.7, Nesterov momentum 0.9 by default)
    x_f <- mixing * x_f + (1 - mixing) * X_f
The all-reduce starts right after the round's inner step; with sync_delay = tau its result is applied
tau inner steps later (the collective runs in the background meanwhile: an async Work), so x_f has moved
on by tau local steps when it is merged. Fragments are strided over the layers (algorithms/fragments.py)
and fragment f's rounds come at steps t with t mod H = f H / F (f = 0: t = H, 2H, ...), so the bytes of
one parameter set are spread over the period. Floating-point buffers (BatchNorm statistics) are averaged
uncompressed at each round of fragment 0. The inner optimizer's state stays local.

With fragments=1, sync_delay=0 and mixing=0 this is DiLoCo: one parameter-sized all-reduce every H steps,
after which every rank continues from X. With outer SGD lr 1 and no momentum it is plsgd with the same H.

`inner_steps="qsr"`: each fragment's next period comes from QSR's rule (algorithms/qsr.py, options h_base,
alpha, gamma, h_min, warmup_steps, total_steps) evaluated with the learning rate at the start of the
step after its round, as qsr does for local SGD; the first periods from the rule at t = 0. A fragment's
next round never starts before its last one was applied: the period is at least sync_delay + 1.

On a pycomm.Mesh the rule runs over mesh["dp"] (on a pipeline's stages: each stage's replicas, in lockstep).
Wrapping a ZeRO optimizer (HSDP + DiLoCo, as torchft runs it) runs it across dp_replicate on ZeRO's fp32
master shards: each rank keeps the global copy, the pseudo-gradient and the outer state of its shard only,
the all-reduce goes over the ranks holding the same shard index, and the inner steps are ZeRO's over
dp_shard (algorithms/composition.py)."""

from __future__ import annotations

from typing import Any, Iterable

import torch

from algorithms import fragments as fragmenting
from algorithms import options as opts
from algorithms import qsr, traits
from algorithms.base import CommOptimizer, copy_into
from algorithms.channel import Pending
from algorithms.registry import register


def outer_optimizer_class(value: Any) -> type:
    """None (torch.optim.SGD), a torch.optim.Optimizer subclass, or the name of one in torch.optim."""
    if value is None:
        return torch.optim.SGD
    if isinstance(value, str):
        found = {
            name.lower(): getattr(torch.optim, name)
            for name in dir(torch.optim)
            if isinstance(getattr(torch.optim, name), type)
            and issubclass(getattr(torch.optim, name), torch.optim.Optimizer)
        }
        if value.lower() not in found:
            raise opts.OptionError(
                f"outer_optimizer {value!r} is not a torch.optim optimizer; expected one of "
                f"{', '.join(sorted(c.__name__ for c in found.values()))} or a class"
            )
        return found[value.lower()]
    if isinstance(value, type) and issubclass(value, torch.optim.Optimizer):
        return value
    raise opts.OptionError(
        f"outer_optimizer must be None (SGD), a torch.optim.Optimizer subclass or its name, got {value!r}"
    )


@register("diloco")
class DiLoCo(CommOptimizer):
    state_layout = traits.PER_RANK  # local parameters, inner state and error-feedback residuals differ per rank
    across_shards = True  # elementwise on the parameters, reads no gradient: also over ZeRO's master shards
    algorithm_options: dict[str, Any] = {
        "inner_steps": 64,
        "outer_lr": 0.7,
        "outer_momentum": None,
        "nesterov": None,
        "outer_optimizer": None,
        "fragments": 1,
        "sync_delay": 0,
        "mixing": 0.0,
        **qsr.PERIOD_OPTIONS,
    }

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        algorithm: str | None = None,
        comm: Any = None,
        *,
        model: torch.nn.Module | None = None,
        buffers: Iterable[torch.Tensor] | None = None,
        **options: Any,
    ) -> None:
        self._model = model  # names the layers that fragments are strided over
        super().__init__(optimizer, algorithm, comm, model=model, buffers=buffers, **options)

    # -- options -------------------------------------------------------------------------------
    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        h = config["inner_steps"]
        given_qsr = {k: config[k] for k in ("h_base", "alpha", "gamma", "h_min") if config[k] != qsr.PERIOD_OPTIONS[k]}
        config = qsr.check_period_options(config)
        config["fragments"] = opts.integer("fragments", config["fragments"], 1)
        config["sync_delay"] = opts.integer("sync_delay", config["sync_delay"], 0)
        if h == "qsr":
            if config["sync_delay"] >= config["h_min"]:
                raise opts.OptionError(
                    f"sync_delay={config['sync_delay']} must be < h_min={config['h_min']}: a "
                    "fragment's round is applied before its next one starts"
                )
        else:
            if isinstance(h, str):
                raise opts.OptionError(f"inner_steps must be an integer >= 1 or 'qsr', got {h!r}")
            h = config["inner_steps"] = opts.integer("inner_steps", h, 1)
            if given_qsr:
                raise opts.OptionError(
                    f"{', '.join(sorted(given_qsr))} set QSR's period rule, which applies only with "
                    f"inner_steps='qsr' (inner_steps is {h})"
                )
            if config["sync_delay"] >= h:
                raise opts.OptionError(
                    f"sync_delay={config['sync_delay']} must be < inner_steps={h}: a fragment's "
                    "round is applied before its next one starts"
                )
            if config["fragments"] > h:
                raise opts.OptionError(
                    f"fragments={config['fragments']} must be <= inner_steps={h}: the fragments' "
                    "rounds are staggered over the period, at most one per step"
                )
        config["outer_lr"] = opts.number("outer_lr", config["outer_lr"], 0.0)
        config["mixing"] = opts.fraction("mixing", config["mixing"])
        cls = config["outer_optimizer"] = outer_optimizer_class(config["outer_optimizer"])
        momentum, nesterov = config["outer_momentum"], config["nesterov"]
        if not issubclass(cls, torch.optim.SGD):
            if momentum is not None or nesterov is not None:
                raise opts.OptionError(
                    f"outer_momentum and nesterov configure the default outer SGD; "
                    f"outer_optimizer={cls.__name__} takes lr=outer_lr only"
                )
        else:
            config["outer_momentum"] = opts.number("outer_momentum", 0.9 if momentum is None else momentum, 0.0, 1.0)
            config["nesterov"] = opts.flag("nesterov", True if nesterov is None else nesterov)
        return config

    # -- state ---------------------------------------------------------------------------------
    setup_from_parameters = True  # _setup derives its state from the parameters alone

    def _setup(self) -> None:
        o = self.options
        # over ZeRO's master shards, a piece belongs to the layer of the parameter it is a piece of
        named = self._inner.master_origins() if self._inner is not None else self.params
        self.fragments = fragmenting.strided(fragmenting.layers(named, self._model), o["fragments"])
        self.global_params = [p.detach().float().clone() for p in self.params]  # X
        self._delta = [torch.zeros_like(x) for x in self.global_params]  # pseudo-gradients
        self.outer = [self._outer_optimizer([self.global_params[i] for i in frag]) for frag in self.fragments]
        self.next_round: list[int | None] = [None] * len(self.fragments)  # None: chosen at the next step
        self.last_round: list[int | None] = [None] * len(self.fragments)  # step of the last round started
        self._in_flight: dict[int, tuple[int, Pending | None]] = {}  # fragment -> (apply at, its all-reduce)
        self.rounds = 0

    def _outer_optimizer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        o, cls = self.options, self.options["outer_optimizer"]
        if issubclass(cls, torch.optim.SGD):
            momentum = o["outer_momentum"]  # Nesterov without momentum is plain SGD (torch refuses the pair)
            return cls(params, lr=o["outer_lr"], momentum=momentum, nesterov=o["nesterov"] and momentum > 0)
        return cls(params, lr=o["outer_lr"])

    def _period(self, steps: int) -> int:
        """H of a period starting with `steps` steps taken (QSR's rule from the rate of the next step)."""
        if self.options["inner_steps"] != "qsr":
            return self.options["inner_steps"]
        return qsr.period(self.options, steps, float(self.optimizer.param_groups[0]["lr"]))

    @property
    def current_period(self) -> int:
        """H of fragment 0's current period (the one the next step is in)."""
        if self.next_round[0] is None:
            return self._period(self.steps)
        return self.next_round[0] - (self.last_round[0] or 0)

    @property
    def in_flight(self) -> dict[int, int]:
        """{fragment: the step (steps taken) at which its round in flight is applied}."""
        return {f: due for f, (due, _) in self._in_flight.items()}

    def _choose_rounds(self) -> None:
        """Each fragment without a next round gets one, from the period that starts now."""
        if None not in self.next_round:
            return
        h, count, delay = self._period(self.steps), len(self.fragments), self.options["sync_delay"]
        for f, last in enumerate(self.last_round):
            if self.next_round[f] is None:
                first = (f * h) // count or h  # t mod H = f H / F; fragment 0 (and a collision at 0) after H
                self.next_round[f] = first if last is None else last + max(h, delay + 1)

    # -- the rule ---------------------------------------------------------------------------------
    def _step(self, loss: float | None) -> None:
        self._choose_rounds()
        self.optimizer.step()
        t = self.steps + 1
        for f in sorted(f for f, (due, _) in self._in_flight.items() if due == t):
            self._apply(f)
        for f, when in enumerate(self.next_round):
            if when == t:
                self._start(f, t)

    @torch.no_grad()
    def _start(self, f: int, t: int) -> None:
        """Fragment f's pseudo-gradient X_f - x_f, all-reduced in the background; applied at t + sync_delay."""
        frag = self.fragments[f]
        delta = [self._delta[i] for i in frag]
        for d, i in zip(delta, frag):
            torch.sub(self.global_params[i], self.params[i].detach(), out=d)
        if f == 0 and self.float_buffers():
            self.channel.allreduce(self.float_buffers(), key="buffers", compress=False)
        self._in_flight[f] = (t + self.options["sync_delay"], self.channel.allreduce_async(delta, key=f"fragment{f}"))
        self.last_round[f], self.next_round[f] = t, None
        if self.options["sync_delay"] == 0:
            self._apply(f)

    @torch.no_grad()
    def _apply(self, f: int) -> None:
        """Fragment f's outer step on the averaged pseudo-gradient, then the merge into the local copy."""
        _, pending = self._in_flight.pop(f)
        if pending is not None:
            pending.wait()
        frag = self.fragments[f]
        for i in frag:
            self.global_params[i].grad = self._delta[i]
        self.outer[f].step()
        for i in frag:
            self.global_params[i].grad = None
        mixing = self.options["mixing"]
        for i in frag:
            x, g = self.params[i].data, self.global_params[i]
            if mixing == 0.0:
                x.copy_(g)
            else:
                x.mul_(mixing).add_(g.to(x.dtype), alpha=1.0 - mixing)
        self.rounds += 1

    @torch.no_grad()
    def average_now(self) -> None:
        """The same model on every rank, e.g. to evaluate or save it: rounds in flight are applied now, then
        x_i <- mean_j x_j (parameters and floating-point buffers, uncompressed), as plsgd's average_now.
        The global copy, the outer optimizers and the fragments' schedule are left as they were (after a
        round of every fragment with mixing 0, x_i is already X and this changes nothing)."""
        for f in sorted(self._in_flight, key=lambda f: self._in_flight[f][0]):
            self._apply(f)
        self._average_params(None, self.float_buffers())

    # -- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._finish_transfers()  # before the channel's residuals are read: a quantized round updates them
        return super().state_dict()

    def _finish_transfers(self) -> None:
        """Wait for the all-reduces in flight (their results land in the pseudo-gradient buffers), so that
        what is in flight is state that a checkpoint can hold; when each is applied does not change."""
        for f, (due, pending) in list(self._in_flight.items()):
            if pending is not None:
                pending.wait()
                self._in_flight[f] = (due, None)

    def _algorithm_state(self) -> dict[str, Any]:
        self._finish_transfers()
        return {
            "global": [x.clone() for x in self.global_params],
            "outer": [o.state_dict() for o in self.outer],
            "next_round": list(self.next_round),
            "last_round": list(self.last_round),
            "rounds": self.rounds,
            "in_flight": {
                f: {"apply_at": due, "mean_delta": [self._delta[i].clone() for i in self.fragments[f]]}
                for f, (due, _) in self._in_flight.items()
            },
        }

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        if len(state["global"]) != len(self.global_params) or len(state["outer"]) != len(self.outer):
            raise ValueError(
                f"state holds a global copy of {len(state['global'])} tensors in {len(state['outer'])} "
                f"fragments; this optimizer has {len(self.global_params)} in {len(self.outer)}"
            )
        for saved, x in zip(state["global"], self.global_params):
            if saved.shape != x.shape:
                raise ValueError(
                    f"global copy tensor of shape {tuple(saved.shape)} does not fit a parameter of shape "
                    f"{tuple(x.shape)}: the state was saved for another model"
                )
        self._finish_transfers()
        copy_into(self.global_params, state["global"])
        for o, saved in zip(self.outer, state["outer"]):
            o.load_state_dict(saved)
        self.next_round, self.last_round = list(state["next_round"]), list(state["last_round"])
        self.rounds = state["rounds"]
        self._in_flight = {}
        for f, flight in state["in_flight"].items():
            copy_into([self._delta[i] for i in self.fragments[int(f)]], flight["mean_delta"])
            self._in_flight[int(f)] = (flight["apply_at"], None)
