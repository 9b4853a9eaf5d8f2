"""What every wrapper whose gradients go through pycomm.GradientBuckets (`self._buckets`) offers the
user's loop: no_sync() for gradient accumulation, a zero_grad() that first finishes a reduction still
in flight, remove_hooks(), and clipping of the reduced gradients. A mixin: list it before CommOptimizer's subclasses."""

from __future__ import annotations

from typing import Any, ContextManager


class BucketedGradients:
    _buckets: Any  # pycomm.GradientBuckets, built in the algorithm's _setup

    def no_sync(self) -> ContextManager[None]:
        """Backward passes inside accumulate gradients locally without communicating."""
        return self._buckets.no_sync()

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._buckets.pending:
            self._buckets.synchronize()
            self._buckets.reset()
        super().zero_grad(set_to_none)  # type: ignore[misc]

    def _gradients_to_clip(self) -> list[Any]:
        self._buckets.synchronize()  # the reduced gradients (backward has done it unless grads came otherwise)
        return super()._gradients_to_clip()  # type: ignore[misc]

    def remove_hooks(self) -> None:
        """Detach this optimizer from the parameters' gradient hooks (e.g. before wrapping them again)."""
        self._buckets.remove_hooks()
