"""ZeRO stage 3: parameters sharded too. Each rank keeps, per unit (a block of the model), only its
shard of the unit's parameters (in the parameters' dtype, beside the fp32 master); a unit's parameters
exist in full only while it runs:

- forward pre-hook: all-gather the unit (and start the next unit's all-gather, the prefetch, on the
  communication queue); forward hook: free it;
- backward pre-hook (a full backward pre-hook, when the gradient of the unit's output is known):
  all-gather it again (prefetching the unit before it);
- when backward has produced all of a unit's gradients: reduce-scatter them into the unit's gradient
  shard (pycomm.GradientBuckets, one bucket per unit) and free the parameters and full gradients.
Autograd keeps a unit's parameters (the leaf tensors) as saved tensors; their storage is swapped
(`p.data`) between the full tensor and an empty one, so backward reads the re-gathered values.

Units: `units=[modules]`, or the model's top-level children (an nn.Sequential or nn.ModuleList
child contributing its children: a transformer's blocks); parameters of no unit (the root's own) and
parameters of several units (tied embeddings) form one more unit around the whole model. As FSDP2 keeps
the root module's parameters unsharded after forward, that root unit stays gathered from the model's
forward until its gradients are reduce-scattered in backward (or the step), so a root parameter may be
used outside the model's forward, between forward and backward: CLIP's `logit_scale` in the loss, an L2
penalty on a learned scale. Between steps `model.parameters()` are empty tensors: read the model
through `opt.full_state_dict()`.

Inside `with opt.gathered_through():` (a Pipeline enters it around each train_step) a unit is not freed
after its forward: it stays gathered from its first forward until its gradients are reduce-scattered, so
micro-batches gather each unit once per step instead of twice per micro-batch (torch's pipelining keeps
FSDP modules unsharded between micro-batches alike); the parameters are empty again after the step."""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

import pycomm
from algorithms import options as opts
from algorithms.base import _check_arguments
from algorithms.registry import register
from algorithms.zero.sharded import ZeroOptimizer

ONE_BUCKET = 1 << 62

# The backward pre-hook is what zero3 wants even where a unit's inputs need no gradient (the first
# unit); torch warns about that case for every such module on every backward.
warnings.filterwarnings(
    "ignore",
    message="Full backward hook is firing when gradients are computed with respect "
    "to module outputs since no inputs require gradients",
)


@dataclass(eq=False)
class Unit:
    module: torch.nn.Module
    params: list[torch.Tensor]
    buckets: Any = None  # its GradientBuckets (one bucket)
    shard: torch.Tensor | None = None  # this rank's shard of its parameters, in their dtype
    gathered: bool = False
    pending: Any = None  # (work, full tensors) of an all-gather in flight
    hooks: list[Any] = field(default_factory=list)


@register("zero3")
class ZeRO3(ZeroOptimizer):
    algorithm_options: dict[str, Any] = {**ZeroOptimizer.algorithm_options, "units": None}

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        algorithm: str | None = None,
        comm: Any = None,
        *,
        model: torch.nn.Module | None = None,
        **options: Any,
    ) -> None:
        _check_arguments(comm, model, options.get("buffers"))  # a wrong comm/model type is named first
        if model is None:
            raise opts.OptionError(
                "zero3 needs model=: its units (the model's blocks, or units=[...]) are "
                "gathered around their forward and backward"
            )
        super().__init__(optimizer, algorithm, comm, model=model, **options)

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        units = config["units"]
        if units is not None:
            if not isinstance(units, (list, tuple)) or not all(isinstance(u, torch.nn.Module) for u in units):
                raise opts.OptionError("units must be a list of the model's submodules")
            model = getattr(self, "model", None)  # apps' config check probes the options without one
            inside = {id(m) for m in model.modules()} if model is not None else None
            if inside is not None and any(id(u) not in inside for u in units):
                raise opts.OptionError("units must be submodules of model=; one of them is not")
        return config

    # -- setup ------------------------------------------------------------------------------------
    def _unit_modules(self) -> list[torch.nn.Module]:
        """units=[...], or the model's children with containers (Sequential, ModuleList) opened: its blocks."""
        if self.options["units"]:
            return list(self.options["units"])
        out = []
        for child in self.model.children():
            out += list(child.children()) if isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList)) else [child]
        return out

    def _plan_groups(self) -> list[list[torch.Tensor]]:
        modules = self._unit_modules()
        uses: dict[int, int] = {}
        for module in modules:
            for p in module.parameters():
                uses[id(p)] = uses.get(id(p), 0) + 1
        mine = {id(p) for p in self.params}
        # a parameter of several units (tied embeddings) and the root's own go to the root unit, which
        # stays gathered through the whole forward and backward
        taken = {i for i, n in uses.items() if n > 1}
        self.units: list[Unit] = []
        for module in modules + [self.model]:  # the root last
            own = module.parameters() if module is not self.model else self.params
            params = [p for p in own if id(p) in mine and id(p) not in taken and p.requires_grad]
            if module is self.model:
                params = [p for p in self.params if id(p) in taken and uses.get(id(p), 0) > 1] + params
            if not params:
                continue
            taken.update(id(p) for p in params)
            if len({p.dtype for p in params}) > 1:
                raise ValueError(
                    f"zero3: unit {type(module).__name__} mixes parameter dtypes "
                    f"{sorted(str(p.dtype) for p in params)}; give units of one dtype"
                )
            unit = Unit(module, params)
            unit.buckets = pycomm.GradientBuckets(
                params,
                comm=self.shard_comm,
                mode="reduce_scatter",
                bucket_bytes=ONE_BUCKET,
                free_grads=True,
                overlap=self.options["overlap_backward"],
                launch=lambda b, u=unit: self._reduce_unit(u, b),
            )
            unit.params = unit.buckets.buckets[0].params  # the bucket's order is the flat order
            self.units.append(unit)
        return [u.params for u in self.units]

    def _after_setup(self) -> None:
        self._keep_gathered = False
        for unit, group in zip(self.units, self.groups):
            dtype = unit.params[0].dtype
            unit.shard = group.master if dtype == torch.float32 else group.master.to(dtype)
            self._free(unit)
            m = unit.module
            unit.hooks = [
                m.register_forward_pre_hook(lambda _m, _a, u=unit: self._gather(u, +1)),
                m.register_full_backward_pre_hook(lambda _m, _g, u=unit: self._gather(u, -1)),
            ]
            if m is not self.model:  # the root unit stays gathered after forward (see the module's docstring)
                unit.hooks.append(m.register_forward_hook(lambda _m, _a, _o, u=unit: self._after_forward(u)))

    @contextlib.contextmanager
    def gathered_through(self) -> Iterator[None]:
        """Units gathered inside stay gathered after their forward, until backward reduce-scatters their
        gradients (outside no_sync) or the step: one all-gather per unit for several micro-batches."""
        previous, self._keep_gathered = self._keep_gathered, True
        try:
            yield
        finally:
            self._keep_gathered = previous

    def _after_forward(self, unit: Unit) -> None:
        if not self._keep_gathered:
            self._free(unit)

    # -- gathering and freeing ----------------------------------------------------------------------
    def _start_gather(self, unit: Unit) -> None:
        if unit.gathered or unit.pending is not None:
            return
        group = self.groups[self.units.index(unit)]
        full = [torch.empty(shape, dtype=unit.shard.dtype, device=unit.shard.device) for shape in group.shapes]
        work = self._allgather_shard(full, unit.shard)
        unit.pending = (work, full)

    @torch.no_grad()
    def _gather(self, unit: Unit, direction: int) -> None:
        """Make the unit's parameters full, then prefetch the unit that runs next (forward: +1)."""
        self._start_gather(unit)
        if unit.pending is not None:
            work, full = unit.pending
            work.wait()
            for p, f in zip(unit.params, full):
                p.data = f
            unit.pending, unit.gathered = None, True
        nxt = self.units.index(unit) + direction
        if 0 <= nxt < len(self.units) and self.units[nxt].module is not self.model:
            self._start_gather(self.units[nxt])

    def _free(self, unit: Unit) -> None:
        for p in unit.params:
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        unit.gathered = False

    def _reduce_unit(self, unit: Unit, bucket: Any) -> Any:
        group = self.groups[self.units.index(unit)]
        for p, shape in zip(bucket.params, group.shapes):
            if p.grad is None or p.grad.shape != shape:  # no gradient (a freed parameter's zeros_like)
                p.grad = torch.zeros(shape, dtype=p.dtype, device=p.device)
        work = self._reduce_scatter(bucket)
        self._free(unit)  # the gradients are packed: the unit's backward is over
        return work

    # -- the step ---------------------------------------------------------------------------------
    def _synchronize(self) -> None:
        for u in self.units:
            u.buckets.synchronize()

    def _gradient_shard(self, index: int) -> torch.Tensor:
        return self.units[index].buckets.buckets[0].shard.float()

    @torch.no_grad()
    def _publish(self) -> None:
        for unit, group in zip(self.units, self.groups):
            if unit.shard is not group.master:
                unit.shard.copy_(group.master)
            if unit.gathered:  # the root unit after a forward without backward (evaluation): refresh it
                self._free(unit)

    def _end_step(self) -> None:
        for u in self.units:
            u.buckets.reset()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for u in self.units:
            if u.buckets.pending:
                u.buckets.synchronize()
                u.buckets.reset()
        super().zero_grad(set_to_none)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate full gradients locally without communicating (the units
        they touched stay gathered until the backward outside it reduce-scatters and frees them)."""
        with contextlib.ExitStack() as stack:
            for u in self.units:
                stack.enter_context(u.buckets.no_sync())
            yield

    def parameter_buffers(self) -> list[torch.Tensor]:
        return [u.shard for u in self.units]

    def gradient_buffers(self) -> list[torch.Tensor]:
        return [u.buckets.buckets[0].shard for u in self.units]

    def remove_hooks(self) -> None:
        for u in self.units:
            u.buckets.remove_hooks()
            for h in u.hooks:
                h.remove()
            u.hooks = []
