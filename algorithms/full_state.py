"""Full (consolidated) state dicts of the methods that do not shard: what FSDP2's get_model_state_dict /
get_optimizer_state_dict(full_state_dict=True) give, `{"model": the model's plain state dict, "optimizer":
the torch optimizer's plain state dict}`, on CPU, the same on every rank, loadable on any number of ranks,
into any method, and the model part into a plain torch model (ZeRO's own are algorithms/zero/sharded_state.py).

- identical state (mbsgd, a parameter server's copy): this rank's values (every rank holds them).
- per-rank state (plsgd, qsr, easgd, lsgd, diloco, ...): the ranks hold different models, so the full
  state is their average: parameters, floating buffers and per-element optimizer state averaged over the
  method's ranks (a collective), as an averaging round makes them; counters (Adam's step) are the rank's.
Loading sets every rank to that state; the method's own state (centre variable, outer optimizer, period
counters) restarts from the loaded parameters, and a codec's error-feedback residuals start afresh."""

from __future__ import annotations

from typing import Any

import torch

from algorithms import state_checks, traits


def _names(opt: Any) -> list[str]:
    """The parameters' names in optimizer order: the model's (model=) or param<i>."""
    model = opt.user_model
    if model is None:
        return [f"param{i}" for i in range(len(opt.params))]
    names = {id(p): n for n, p in model.named_parameters()}
    return [names.get(id(p), f"param{i}") for i, p in enumerate(opt.params)]


def _per_element(value: Any) -> bool:
    return torch.is_tensor(value) and value.dim() > 0 and value.is_floating_point()


@torch.no_grad()
def full_state_dict(opt: Any) -> dict[str, Any]:
    """The full state of `opt` (a CommOptimizer that does not shard); collective for per-rank states."""
    average = opt.state_layout == traits.PER_RANK and opt.comm.size > 1
    model = opt.user_model
    named = model.state_dict().items() if model is not None else zip(_names(opt), opt.params)
    values = {k: v.detach().clone() for k, v in named}
    saved = opt.torch_optimizer.state_dict()
    state = {
        i: {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in s.items()}
        for i, s in saved["state"].items()
    }
    if average:
        floats = [v for v in values.values() if v.is_floating_point()]
        floats += [v for s in state.values() for v in s.values() if _per_element(v)]
        opt.channel.allreduce(floats, key="full_state", compress=False)
    return {
        "model": {k: v.cpu() for k, v in values.items()},
        "optimizer": {
            "state": {i: {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in s.items()} for i, s in state.items()},
            "param_groups": saved["param_groups"],
        },
    }


@torch.no_grad()
def load_full_state_dict(opt: Any, full: Any, steps: int | None) -> None:
    """Set this rank to a full state (of any number of ranks, any method); `steps` the step counter
    (None keeps it)."""
    if not isinstance(full, dict) or not {"model", "optimizer"} <= set(full):
        raise TypeError(
            "load_full_state_dict: expected the {'model': ..., 'optimizer': ...} dict full_state_dict() "
            f"returns, got {type(full).__name__}"
            + (f" with keys {sorted(map(str, full))[:6]}" if isinstance(full, dict) else "")
        )
    names = _names(opt)
    missing = [n for n in names if n not in full["model"]]
    if missing:
        raise ValueError(
            f"load_full_state_dict: the model state lacks parameter {missing[0]!r}: it was saved for another model"
        )
    state_checks.check_optimizer_shapes(full["optimizer"], opt.params)
    if opt.user_model is not None:
        opt.user_model.load_state_dict(full["model"])
    else:
        for n, p in zip(names, opt.params):
            p.copy_(full["model"][n])
    opt.torch_optimizer.load_state_dict(full["optimizer"])
    opt.channel.residuals = {}
    if steps is not None:
        opt.steps = steps
    opt._restart_from_parameters()
