"""What makes a wrapper around a torch optimizer a `torch.optim.Optimizer` itself, so that LR
schedulers, `torch.amp.GradScaler`, step hooks, Lightning and Accelerate take it like any optimizer.

The wrapper holds no parameters of its own: `param_groups`, `state` and `defaults` are the wrapped
optimizer's (a scheduler that sets `lr` in a group sets it where the update reads it).
`torch.optim.Optimizer.__init__` is not called, because it would register the parameter groups a second
time and bind `param_groups`/`state` as attributes of the wrapper; only its hook registries and step
profiling are set up, by `_init_optimizer_protocol()`."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

# The registries torch.optim.Optimizer.__init__ creates; its register_*_hook methods and the profiled
# step read them.
_HOOK_REGISTRIES = (
    "_optimizer_step_pre_hooks",
    "_optimizer_step_post_hooks",
    "_optimizer_state_dict_pre_hooks",
    "_optimizer_state_dict_post_hooks",
    "_optimizer_load_state_dict_pre_hooks",
    "_optimizer_load_state_dict_post_hooks",
)


class OptimizerProtocol(torch.optim.Optimizer):
    """A `torch.optim.Optimizer` that delegates its parameter groups and state to `self.optimizer`."""

    optimizer: torch.optim.Optimizer

    def _init_optimizer_protocol(self) -> None:
        for name in _HOOK_REGISTRIES:
            setattr(self, name, OrderedDict())
        self._patch_step_function()  # step pre/post hooks and profiler ranges, as torch optimizers have

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, state: Any) -> None:
        self.optimizer.state = state

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, defaults: dict[str, Any]) -> None:
        self.optimizer.defaults = defaults

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise NotImplementedError(
            "a CommOptimizer's parameters are fixed when it wraps the optimizer: "
            "add the group to the torch optimizer before wrapping it"
        )
