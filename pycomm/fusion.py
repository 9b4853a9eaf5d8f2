"""Fused all-reduce (`Communicator.allreduce_coalesced`) and broadcast (`broadcast_coalesced`) of many
tensors.

Tensors are grouped by dtype. Small ones are packed into flat buckets of at most `bucket_bytes` (one pass
of the pack kernel, which also casts floating tensors to the wire dtype and folds AVG's 1/size into the
copy); a tensor of at least `in_place_bytes` that travels in its own dtype is reduced where it lies, in a
bucket of its own: copying it would cost two passes over memory and save no per-op overhead worth them
(host default 256 KiB; on GPUs only tensors larger than a bucket). With async_op=True (the default) every
bucket's op is submitted at once and the returned work unpacks each bucket into its tensors when waited;
with async_op=False the buckets run one after another as blocking ops, on the caller's thread where the
transport allows it (no hand-off to the progress thread), and the call returns with the results in place.

Why (ResNet-50's 161 gradients, 102 MB, 2 ranks of the 2-core machine): packing and unpacking every byte
costs 15 + 15 ms against 21-26 ms for one flat 102 MB all-reduce, so 4 MiB buckets of everything took 1.14x
flat mpi4py's time; with the in-place routing 0.79x (4 ranks 0.76x; on the idle machine, with the
progress thread yielding to the caller's (queue/spin.h), 0.70-0.78x and 0.64-0.69x), the same as one blocking all-reduce
per tensor: what is left is the fixed and mid-size cost of ~50 ops (256 KiB-9 MiB run at 5-8 GB/s, the
flat 102 MB one at ~4 GB/s but in one op: 0.58x). The in-place size was swept (64 KiB-4 MiB): 256 KiB is
best, 4 MiB (larger tensors only) 0.98x. Since the progress thread runs one large collective at a time
(queue/op_queue.cc), the async default takes 0.54-0.55x flat mpi4py's time in A/B runs (0.63-0.66x with
every bucket in flight at once), and 0.66x (2 ranks) / 0.59x (4) in benchmarks/results/collectives_fusion.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from pycomm import _dtypes, kernels, tracing
from pycomm._buffers import POOL
from pycomm._build import core
from pycomm._tensors import check_tensor, place_of
from pycomm._validate import check_bool
from pycomm.errors import PycommError, named
from pycomm.ops import AVG, SUM, check_op
from pycomm.work import Work

WIRE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# bucket_bytes=None picks by where the tensors live. Host: buckets that stay in the last-level cache
# pack, reduce and unpack without a trip to memory (ResNet-50 gradients on 2 ranks: 3.1x per-tensor
# gloo at 4 MiB against 2.0x at 25 MiB). GPU: 25 MiB (DDP's default), where launches dominate.
HOST_BUCKET_BYTES = 4 << 20
DEVICE_BUCKET_BYTES = 25 << 20
# Host tensors of at least this many bytes (sent in their own dtype) skip the pack: above it one op's
# fixed cost is small against copying the tensor in and out of a bucket.
HOST_IN_PLACE_BYTES = 256 << 10


def bucket_bytes_for(bucket_bytes: object, tensors: Sequence[torch.Tensor], what: str) -> int:
    """`bucket_bytes` checked (a positive int), or, for None, the default where `tensors` live."""
    if bucket_bytes is None:
        on_device = any(t.device.type != "cpu" for t in tensors)
        return DEVICE_BUCKET_BYTES if on_device else HOST_BUCKET_BYTES
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
        raise ValueError(
            f"{what}: bucket_bytes must be a positive int, or None for the default "
            f"({HOST_BUCKET_BYTES >> 20} MiB for host tensors, {DEVICE_BUCKET_BYTES >> 20} MiB "
            f"for GPU tensors), got {bucket_bytes!r}"
        )
    return bucket_bytes


def in_place_bytes_for(tensors: Sequence[torch.Tensor], bucket_bytes: int) -> int:
    """The size from which a tensor is reduced where it lies: HOST_IN_PLACE_BYTES (or the bucket size if
    smaller) for host tensors; on GPUs, where launches dominate, only tensors larger than a bucket."""
    if any(t.device.type != "cpu" for t in tensors):
        return bucket_bytes + 1
    return min(HOST_IN_PLACE_BYTES, bucket_bytes)


@dataclass
class BucketPlan:
    """Tensors (indices into the caller's list) sharing one flat buffer on the wire."""

    dtype: torch.dtype  # the tensors' dtype
    wire_dtype: torch.dtype  # the buffer's dtype (== dtype for integers and when not cast)
    indices: list[int] = field(default_factory=list)
    numel: int = 0

    @property
    def in_place(self) -> bool:
        """A lone tensor sent as it is needs no buffer: it is all-reduced where it lies."""
        return len(self.indices) == 1 and self.wire_dtype == self.dtype


def plan_buckets(
    tensors: Sequence[torch.Tensor],
    bucket_bytes: int,
    wire_dtype: torch.dtype | None,
    in_place_bytes: int | None = None,
) -> list[BucketPlan]:
    """Group by dtype (in order of first appearance), then fill buckets up to bucket_bytes on the wire.

    Empty tensors need no communication and are left out; a tensor larger than bucket_bytes gets a
    bucket of its own, and so does one of at least `in_place_bytes` (None: never) that is not cast, while
    the open bucket stays open for the smaller tensors after it (plans are in the order buckets open).
    Every rank computes the same plan from the same shapes."""
    groups: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        if t.numel():
            groups.setdefault(t.dtype, []).append(i)
    plans: list[BucketPlan] = []
    for dtype, indices in groups.items():
        wire = wire_dtype if wire_dtype is not None and dtype in _dtypes.FLOATING else dtype
        item = torch.empty((), dtype=wire).element_size()
        current: BucketPlan | None = None
        for i in indices:
            n = tensors[i].numel()
            if in_place_bytes is not None and wire == dtype and n * item >= in_place_bytes:
                plans.append(BucketPlan(dtype, wire, [i], n))
                continue
            if current is None or (current.numel + n) * item > bucket_bytes:
                current = BucketPlan(dtype, wire)
                plans.append(current)
            current.indices.append(i)
            current.numel += n
    return plans


class _InFlight:
    """One bucket on the wire: its buffer, its transport work (None: a blocking op, already done) and how
    to put the result back."""

    def __init__(
        self,
        tensors: list[torch.Tensor],
        buffer: torch.Tensor | None,
        work: Work | None,
        floor_divide_by: int = 1,
        unpack: bool = True,
        span: tracing.SpanHandle | None = None,
    ) -> None:
        self.tensors, self.buffer, self.work = tensors, buffer, work
        self.floor_divide_by = floor_divide_by  # integer AVG: SUM, then floor division
        self.unpack = unpack  # a broadcast's root already holds the result
        self.span = span  # tracing: this bucket from its pack to its unpack

    def finish(self) -> None:
        if self.work is not None:
            self.work.wait()
        result = self.buffer if self.buffer is not None else self.tensors[0]
        if self.floor_divide_by != 1:
            result.div_(self.floor_divide_by, rounding_mode="floor")
        self.release(unpack=self.unpack)
        tracing.end(self.span)

    def release(self, unpack: bool = False) -> None:
        """Unpack (if asked) and give the buffer back to the pool; an error path releases without."""
        if self.buffer is not None:
            if unpack:
                kernels.unpack(self.buffer, self.tensors)
            POOL.give(self.buffer)
            self.buffer = None


class CoalescedWork(Work):
    """The pending result of a coalesced op (`name`) of several buckets, each with a `work` and a
    `finish()`. wait() finishes every bucket in order, unpacking it into the caller's tensors (which must
    not be read or written until then)."""

    __slots__ = ("_pending", "num_buckets", "_name", "_matching", "_describe", "span")

    def __init__(
        self,
        buckets: list[Any],
        name: str = "allreduce_coalesced",
        matching: Work | None = None,
        describe: str | None = None,
    ) -> None:  # Work.__init__ not called: no handle of its own
        self._pending = buckets
        self.num_buckets = len(buckets)
        self._name = name
        self._matching = matching  # PYCOMM_DEBUG: the op's own matching entry, waited first
        self._describe = describe or f"{name} ({self.num_buckets} buckets)"
        self.span: tracing.SpanHandle | None = None  # tracing: the whole op, ended by wait()

    def is_completed(self) -> bool:
        """True when wait() would not block on the network (the unpack may still be to do)."""
        return all(b.work.is_completed() for b in self._pending)

    def wait(self) -> None:
        try:
            if self._matching is not None:
                self._matching.wait()
                self._matching = None
            while self._pending:
                self._pending[0].finish()
                self._pending.pop(0)
            tracing.end(self.span)
        except PycommError as e:  # a bucket's error names an internal all-reduce: name the user's op
            raise named(
                e, f"{self._describe} (bucket {self.num_buckets - len(self._pending)} of {self.num_buckets})"
            ) from e

    synchronize = wait

    @property
    def info(self) -> dict:
        return {
            "name": self._name,
            "buckets": self.num_buckets,
            "pending": len(self._pending),
            "describe": self._describe,
        }


def check_tensor_list(tensors: object, bucket_bytes: object, what: str) -> tuple[list[torch.Tensor], int]:
    """A list or tuple of contiguous tensors on one device, and the bucket size (None: the default)."""
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, Sequence):
        raise TypeError(f"{what}: tensors must be a list or tuple of tensors, got {type(tensors).__name__}")
    checked = [check_tensor(t, f"{what}: tensors[{i}]") for i, t in enumerate(tensors)]
    if checked:
        place_of(checked, f"{what}: tensors")
    return checked, bucket_bytes_for(bucket_bytes, checked, what)


def op_span(
    comm: Any, name: str, tensors: Sequence[torch.Tensor], plans: list[BucketPlan] | None = None, op: Any = None
) -> tracing.SpanHandle | None:
    """Tracing: a compound op's span with its logical and wire bytes (None while not recording)."""
    if not tracing.ACTIVE:
        return None
    logical = sum(t.numel() * t.element_size() for t in tensors)
    wire = logical if plans is None else sum(p.numel * _itemsize(p.wire_dtype) for p in plans)
    return tracing.span(
        name,
        comm,
        count=sum(t.numel() for t in tensors),
        dtype=tensors[0].dtype if tensors else None,
        nbytes=logical,
        wire_bytes=wire,
        op=op,
    )


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def bucket_span(comm: Any, bucket_id: int, plan: BucketPlan, op: Any = None) -> tracing.SpanHandle | None:
    if not tracing.ACTIVE:
        return None
    return tracing.span(
        "bucket",
        comm,
        count=plan.numel,
        dtype=plan.dtype,
        nbytes=plan.numel * _itemsize(plan.dtype),
        wire_bytes=plan.numel * _itemsize(plan.wire_dtype),
        op=op,
        bucket=bucket_id,
        algorithm="in_place" if plan.in_place else "packed",
    )


def _run(
    start: Callable[[int, BucketPlan, bool], _InFlight],
    plans: list[BucketPlan],
    async_op: bool,
    name: str,
    describe: str,
    matching: Work | None = None,
    span: tracing.SpanHandle | None = None,
) -> CoalescedWork | None:
    """Start every bucket (start(bucket_id, plan, async_op)). async_op: all submitted now, finished by the
    returned work's wait(). Else one after another, each a blocking op finished before the next is packed
    (its buffer stays in cache and the transport may run it on this thread); errors name the bucket."""
    if async_op:
        in_flight: list[_InFlight] = []
        try:
            for bucket_id, plan in enumerate(plans):
                in_flight.append(start(bucket_id, plan, True))
        except PycommError:
            for f in in_flight:
                f.release()
            _raise_matching_failure(matching, describe, len(plans))
            raise
        work = CoalescedWork(in_flight, name, matching, describe)
        work.span = span
        return work
    bucket_id = 0
    try:
        if matching is not None:
            matching.wait()
        for bucket_id, plan in enumerate(plans):
            start(bucket_id, plan, False).finish()
    except PycommError as e:
        raise named(e, f"{describe} (bucket {bucket_id} of {len(plans)})") from e
    tracing.end(span)
    return None


def broadcast_coalesced(
    comm: Any, tensors: Sequence[torch.Tensor], root: int, bucket_bytes: int | None = None, async_op: bool = True
) -> CoalescedWork | None:
    """Broadcast every tensor from `root`, in place, through flat buckets per dtype (one pack pass on the
    root, one unpack pass elsewhere); large tensors are sent where they lie."""
    what = "broadcast_coalesced"
    async_op = check_bool(async_op, f"{what}: async_op")
    tensors, bucket_bytes = check_tensor_list(tensors, bucket_bytes, what)

    def start(bucket_id: int, plan: BucketPlan, async_op: bool) -> _InFlight:
        members = [tensors[i] for i in plan.indices]
        span = bucket_span(comm, bucket_id, plan)
        if plan.in_place:
            return _InFlight(members, None, comm.broadcast(members[0], root=root, async_op=async_op), span=span)
        buffer = POOL.take(plan.numel, plan.dtype, members[0].device)
        try:
            if comm.rank == root:
                kernels.pack(members, buffer)
            work = comm.broadcast(buffer, root=root, async_op=async_op)
        except BaseException:
            POOL.give(buffer)
            raise
        return _InFlight(members, buffer, work, unpack=comm.rank != root, span=span)

    plans = plan_buckets(tensors, bucket_bytes, None, in_place_bytes_for(tensors, bucket_bytes))
    return _run(
        start,
        plans,
        async_op,
        what,
        f"{what} ({len(tensors)} tensors, root {root})",
        span=op_span(comm, what, tensors, plans),
    )


def allreduce_coalesced(
    comm: Any,
    tensors: Sequence[torch.Tensor],
    op: Any = AVG,
    bucket_bytes: int | None = None,
    wire_dtype: torch.dtype | None = None,
    async_op: bool = True,
) -> CoalescedWork | None:
    """All-reduce every tensor of `tensors` in place through fused buckets; returns a work to wait on
    (async_op=False: runs the buckets blocking and returns None with the results in place).

    wire_dtype (bf16, fp16 or fp32) is what floating tensors travel as; integer tensors are never
    cast. AVG on packed floating tensors is a SUM of values pre-scaled by 1/size in the pack pass;
    on a tensor reduced where it lies, the transport's AVG."""
    what = "allreduce_coalesced"
    async_op = check_bool(async_op, f"{what}: async_op")
    tensors, bucket_bytes = check_tensor_list(tensors, bucket_bytes, what)
    op = check_op(op, what)
    if wire_dtype is not None and wire_dtype not in WIRE_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in WIRE_DTYPES)
        raise TypeError(f"{what}: wire_dtype must be None or one of {names}, got {wire_dtype!r}")

    total = sum(t.numel() for t in tensors)
    describe = f"allreduce_coalesced ({len(tensors)} tensors, {total} elements, op {op.name})"
    # PYCOMM_DEBUG: matched as one op first, so that a rank running plain all-reduces of the same sizes
    # here is caught (by default each bucket's all-reduce is matched on its own: sizes, dtype, op).
    dtype = tensors[0].dtype if tensors else torch.float32
    matching = comm._match(what, total, dtype, op) if core().debug_checks() else None

    def start(bucket_id: int, plan: BucketPlan, async_op: bool) -> _InFlight:
        members = [tensors[i] for i in plan.indices]
        floating = plan.dtype in _dtypes.FLOATING
        # AVG of packed floats: pre-scale by 1/size in the pack pass (also keeps fp16 sums in range),
        # then SUM; AVG of integers (which cannot be averaged on the wire): SUM, then floor division.
        wire_op = SUM if op == AVG and not (floating and plan.in_place) else op
        floor_div = comm.size if op == AVG and not floating else 1
        span = bucket_span(comm, bucket_id, plan, op)
        if plan.in_place:
            work = comm.allreduce(members[0], op=wire_op, async_op=async_op, bucket=bucket_id)
            return _InFlight(members, None, work, floor_div, span=span)
        buffer = POOL.take(plan.numel, plan.wire_dtype, members[0].device)
        try:
            kernels.pack(members, buffer, scale=1.0 / comm.size if floating and op == AVG else 1.0)
            work = comm.allreduce(buffer, op=wire_op, async_op=async_op, bucket=bucket_id)
        except BaseException:
            POOL.give(buffer)
            raise
        return _InFlight(members, buffer, work, floor_div, span=span)

    plans = plan_buckets(tensors, bucket_bytes, wire_dtype, in_place_bytes_for(tensors, bucket_bytes))
    return _run(start, plans, async_op, what, describe, matching, op_span(comm, what, tensors, plans, op))


def _raise_matching_failure(matching: Work | None, describe: str, buckets: int) -> None:
    """PYCOMM_DEBUG: when the op's own matching failed on the progress thread before a bucket was submitted,
    the bucket is refused as "communicator is broken"; raise the matching's MismatchError instead, named
    as CoalescedWork.wait() names it, so the error does not depend on that race."""
    if matching is None:
        return
    try:
        matching.wait()
    except PycommError as e:
        raise named(e, f"{describe} (bucket 0 of {buckets})") from e
