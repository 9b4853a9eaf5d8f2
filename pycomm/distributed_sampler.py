"""`pycomm.DistributedSampler`: which samples of an epoch each data-parallel rank takes, as torch's
DistributedSampler gives them, from pycomm's ranks, and resumable at any sample of the epoch on any
number of ranks.

Each epoch is a permutation of range(n) drawn from (seed, epoch) (range(n) itself with shuffle=False).
The positions of that order are dealt round-robin: position p goes to rank p % num_replicas, counted
from the epoch's `offset`, the samples (over all ranks) already trained on. So the samples the ranks
take together after k batches of b are positions [offset, offset + k b num_replicas) of the order, one
contiguous run whatever the number of ranks: a run stopped there and resumed with
offset = offset + k b num_replicas on any number of ranks takes every remaining sample once.
Every rank gets the same count: drop_last=True drops the last (n - offset) % num_replicas positions;
drop_last=False (torch's default) repeats the first ones to fill the last round."""

from __future__ import annotations

from typing import Any, Iterator, Sized

import torch


class DistributedSampler(torch.utils.data.Sampler[int]):
    """Indices of this rank's samples for one epoch; give it to a DataLoader as `sampler=`.

    sampler = pycomm.DistributedSampler(dataset, comm=comm, seed=0)   # comm: mesh["dp"] under a Mesh
    for epoch in range(epochs):
        sampler.set_epoch(epoch)            # set_epoch(epoch, offset=...) where a resumed epoch starts
        for batch in DataLoader(dataset, batch_size=b, sampler=sampler): ...

    `dataset` is anything with a length (or the length itself). `comm` (default pycomm.world()) is the
    data-parallel group (a pycomm.Mesh stands for its mesh["dp"]); `num_replicas=` and `rank=` (torch's
    names) set them without a communicator (ranks that take no data, tests)."""

    def __init__(
        self,
        dataset: Sized | int,
        comm: Any = None,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.num_samples = _length(dataset)
        if comm is not None and (num_replicas is not None or rank is not None):
            raise ValueError("DistributedSampler: give comm= or num_replicas= and rank=, not both")
        if num_replicas is None or rank is None:
            if num_replicas is not None or rank is not None:
                raise ValueError("DistributedSampler: num_replicas= and rank= go together (or give comm=)")
            comm = comm if comm is not None else _world()
            if hasattr(comm, "coords") and hasattr(comm, "shape"):  # a pycomm.Mesh: its data-parallel group
                comm = comm["dp"]
            num_replicas, rank = comm.size, comm.rank
        for name, value in (("num_replicas", num_replicas), ("rank", rank), ("seed", seed)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"DistributedSampler: {name} must be an int, got {type(value).__name__}")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(
                f"DistributedSampler: rank must be in [0, num_replicas={num_replicas}) with "
                f"num_replicas >= 1, got rank={rank}"
            )
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = bool(shuffle), seed, bool(drop_last)
        self.epoch, self.offset = 0, 0

    def set_epoch(self, epoch: int, offset: int = 0) -> None:
        """The epoch the next iteration draws, starting `offset` samples (over all ranks) into it."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"DistributedSampler.set_epoch: epoch must be an int >= 0, got {epoch!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= self.num_samples:
            raise ValueError(
                f"DistributedSampler.set_epoch: offset must be an int in [0, {self.num_samples}] "
                f"(samples of the epoch already taken), got {offset!r}"
            )
        self.epoch, self.offset = epoch, offset

    def offset_after(self, batches: int, batch_size: int) -> int:
        """The epoch's offset once every rank has taken `batches` more batches of `batch_size` from this
        iteration: what to save, and to give set_epoch when resuming (on any number of ranks)."""
        return min(self.offset + batches * batch_size * self.num_replicas, self.num_samples)

    def state_dict(self, batches: int = 0, batch_size: int = 1) -> dict[str, int]:
        """{"epoch", "offset"} after `batches` batches of this iteration (see offset_after)."""
        return {"epoch": self.epoch, "offset": self.offset_after(batches, batch_size)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.set_epoch(state["epoch"], state["offset"])

    def order(self, epoch: int) -> torch.Tensor:
        """The epoch's order of all sample indices (the same on every rank)."""
        if not self.shuffle:
            return torch.arange(self.num_samples)
        # modulo the generator's seed range, so any int seed works (apps' train.seed goes up to 2**64 - 1);
        # the identity for the usual seeds (torch wraps negative ones the same way)
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % 2**64)
        return torch.randperm(self.num_samples, generator=generator)

    def window(self, epoch: int, start: int, stop: int) -> torch.Tensor:
        """This rank's indices among positions [start, stop) of the epoch's order: every
        num_replicas-th from start + rank, the same count on every rank (drop_last decides the rest)."""
        if not 0 <= start <= stop <= self.num_samples:
            raise ValueError(
                f"DistributedSampler.window: need 0 <= start <= stop <= {self.num_samples}, got [{start}, {stop})"
            )
        positions = self.order(epoch)[start:stop]
        if not self.drop_last and len(positions) % self.num_replicas:
            fill = self.num_replicas - len(positions) % self.num_replicas
            positions = torch.cat([positions, positions.repeat(fill // max(len(positions), 1) + 1)[:fill]])
        count = len(positions) // self.num_replicas
        return positions[self.rank :: self.num_replicas][:count]

    def __iter__(self) -> Iterator[int]:
        return iter(self.window(self.epoch, self.offset, self.num_samples).tolist())

    def __len__(self) -> int:
        remaining = self.num_samples - self.offset
        return remaining // self.num_replicas if self.drop_last else -(-remaining // self.num_replicas)

    def __repr__(self) -> str:
        return (
            f"DistributedSampler({self.num_samples} samples, rank {self.rank} of {self.num_replicas}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, epoch={self.epoch}, "
            f"offset={self.offset})"
        )


def _length(dataset: Any) -> int:
    n = dataset if isinstance(dataset, int) and not isinstance(dataset, bool) else None
    if n is None:
        try:
            n = len(dataset)
        except TypeError:
            raise TypeError(
                f"DistributedSampler: dataset must have a length (or be the number of samples), got "
                f"{type(dataset).__name__}"
            ) from None
    if n < 0:
        raise ValueError(f"DistributedSampler: the dataset's length must be >= 0, got {n}")
    return n


def _world() -> Any:
    from pycomm.runtime import is_initialized, world

    if not is_initialized():
        raise RuntimeError(
            "DistributedSampler: pycomm is not initialised; call pycomm.init() first, or give "
            "comm= (e.g. mesh['dp']) or num_replicas= and rank="
        )
    return world()
