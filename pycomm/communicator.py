"""pycomm.Communicator: collectives and point-to-point ops on torch tensors over one transport.

Every op is checked here (tensor kind, dtype, device, sizes, peers) and handed to the transport as raw
buffers; the transport runs the ops of one communicator in submission order on its own queue. The compound
ops (coalesced, sharded, quantized) are pycomm/communicator_compound.py's, a class Communicator mixes in."""

from __future__ import annotations

import threading
from typing import Any, Optional, Sequence, cast

import torch

from pycomm import _dtypes, p2p, rank_agreement, settings, tracing
from pycomm._build import core
from pycomm._tensors import CPU, Place, check_tensor, place_of, ptr
from pycomm._validate import check_bool, check_int
from pycomm.communicator_compound import CompoundOps
from pycomm.errors import PycommError
from pycomm.ops import AVG, SUM, ReduceOp, check_op
from pycomm.work import Work

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1  # MPI's int: colors, keys, bucket labels

REDUCIBLE = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
)
_REDUCIBLE_CODES = {d: _dtypes.CODES[d] for d in REDUCIBLE}


# The fewest async Works kept before completed ones are swept out (Communicator._submit).
_PRUNE_MIN = 16


def _plain_host(t: object) -> bool:
    """A contiguous host tensor of torch's own class: blocking calls on it skip the general checks."""
    return type(t) is torch.Tensor and t.is_cpu and t.is_contiguous()


class Communicator(CompoundOps):
    """A group of ranks. Obtain one from pycomm.world(), comm.split(), comm.split_by_node() or
    pycomm.from_mpi4py(); every rank of the group must call each collective, in the same order."""

    def __init__(self, transport: Any, name: str = "world") -> None:
        try:
            rank_agreement.check(transport)  # settings every rank must share, before any op (collective)
        except BaseException:
            transport.shutdown()
            raise
        self._t = transport
        # The common calls' checks read it on every op: a plain attribute, 10 ns where the transport's is 90.
        self._size: int = transport.size
        # The blocking host collectives' one-call submit-and-wait (csrc/bindings/blocking_calls.cc); None
        # on transports without them (gloo's, in Python).
        c = core()
        calls = c.blocking_calls(transport) if isinstance(transport, c.Transport) else {}
        self._allreduce_wait = calls.get("allreduce_wait")
        self._broadcast_wait = calls.get("broadcast_wait")
        self._allgather_wait = calls.get("allgather_wait")
        self._reduce_scatter_wait = calls.get("reduce_scatter_wait")
        self.name = name
        # The pycomm.Mesh dimension this communicator serves ("pp", "dp_shard", ...; "" for none): traces
        # show it beside each op (pycomm/tracing/__init__.py).
        self.mesh_dim = ""
        # Async ops' Works, so their tensors outlive a Work the caller drops (see _submit). The lock: threads
        # sharing the communicator (is_completed releases the GIL mid-sweep, and a sweep must not drop a
        # Work another thread appended meanwhile).
        self._in_flight: list[Work] = []
        self._prune_at = _PRUNE_MIN
        self._in_flight_lock = threading.Lock()
        self._by_node: Optional[tuple[Communicator, Communicator]] = None  # split_by_node's pair, once made
        tracing.register(self)

    # ---- who is here -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._t.rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def local_rank(self) -> int:
        """Rank among this communicator's ranks on the same node."""
        return self._t.local_rank

    @property
    def local_size(self) -> int:
        return self._t.local_size

    @property
    def oversubscribed(self) -> Optional[bool]:
        """Whether backend "mpi" found ranks outnumbering cores on some node of this communicator:
        agreed by every rank when the communicator is made, from PYCOMM_OVERSUBSCRIBED or, by default,
        from each node's rank count against the union of its ranks' CPU affinities. Choices every rank
        must make alike key on it: the host broadcast then takes the binomial tree at every size, and
        allreduce_quantized's default segment is 4 Mi elements. (Each process's polls and point-to-point
        window follow its own node's flag and machine load instead.) None on the backends that do not
        key on it (gloo, nccl, local)."""
        return self._t.oversubscribed

    @property
    def backend(self) -> str:
        """ "mpi", "gloo" (torch.distributed's, CPU ranks MPI cannot join), "nccl" (RCCL on ROCm) or "local" (one rank)."""
        return self._t.backend

    def __repr__(self) -> str:
        return f"<pycomm.Communicator {self.name} rank {self.rank} of {self.size} ({self.backend})>"

    # ---- helpers -----------------------------------------------------------------------------
    def _submit(self, handle: Any, keep: tuple, place: Place, async_op: bool) -> Optional[Work]:
        if not async_op:
            # The transport was told the caller waits (it may have run the op already): wait on the
            # handle directly, no Work to build. place.stream is the current stream, as Work.wait uses.
            handle.wait(place.stream, core().stall_timeout())
            return None
        work = Work(handle, keep, place.device)
        # Until an op completes, its tensors must outlive a Work the caller may drop. Completed ones are
        # dropped when the list has doubled since the last sweep: a sweep per op made submitting n ops
        # O(n^2) (ResNet-50's 43 fused buckets: 0.4 ms of a 1.3 ms submit). So a dropped Work's tensors
        # may live on after its op completed, until the next sweep (at most twice the peak in flight).
        with self._in_flight_lock:
            self._in_flight.append(work)
            if len(self._in_flight) >= self._prune_at:
                self._in_flight = [w for w in self._in_flight if not w.is_completed()]
                self._prune_at = max(_PRUNE_MIN, 2 * len(self._in_flight))
        return work

    def _peer(self, peer: object, what: str, name: str) -> int:
        if not isinstance(peer, int) or isinstance(peer, bool) or not 0 <= peer < self.size:
            raise ValueError(f"{what}: {name} must be a rank in [0, {self.size}), got {peer!r}")
        return peer

    @staticmethod
    def _reducible(t: torch.Tensor, op: ReduceOp, what: str) -> None:
        if op == AVG and not t.dtype.is_floating_point:
            raise TypeError(f"{what}: op AVG needs a floating tensor, got {t.dtype} (use SUM and divide)")

    @staticmethod
    def _pair(out: object, t: object, what: str, dtypes: Sequence[torch.dtype] | None = None):
        out = check_tensor(out, f"{what}: out", dtypes)
        t = check_tensor(t, f"{what}: tensor", dtypes)
        if out.dtype != t.dtype:
            raise TypeError(f"{what}: out has dtype {out.dtype} but tensor has {t.dtype}; they must match")
        return out, t, place_of([out, t], what)

    # ---- collectives -------------------------------------------------------------------------
    def allreduce(
        self, tensor: torch.Tensor, op: ReduceOp = SUM, async_op: bool = False, *, bucket: int = -1
    ) -> Optional[Work]:
        """Reduces `tensor` over all ranks, in place. op: SUM, AVG (floating only), MAX, MIN.
        `bucket` labels the op in NVTX ranges and errors (fusion buckets)."""
        code = None
        if (
            type(tensor) is torch.Tensor
            and type(op) is ReduceOp
            and type(async_op) is bool
            and type(bucket) is int
            and -1 <= bucket <= INT32_MAX
            and tensor.is_cpu
            and tensor.is_contiguous()
            and (op is not AVG or tensor.dtype.is_floating_point)
        ):
            # The common call (a plain contiguous host tensor): the checks below, each the cheapest form of
            # itself (every torch attribute read costs 50-100 ns); a dtype without a code takes them all.
            t, code, place = tensor, _REDUCIBLE_CODES.get(tensor.dtype), CPU
            data, n = tensor.data_ptr(), tensor.numel()
        if code is None:
            async_op = check_bool(async_op, "allreduce: async_op")
            op = check_op(op, "allreduce")
            bucket = check_int(bucket, "allreduce: bucket", min_value=-1, max_value=INT32_MAX)
            t = check_tensor(tensor, "allreduce: tensor", REDUCIBLE)
            self._reducible(t, op, "allreduce")
            place = place_of([t], "allreduce")
            code = _dtypes.code(t.dtype, "allreduce")
            data, n = ptr(t), t.numel()
        wait = self._allreduce_wait
        if not async_op and wait is not None and place is CPU:
            # Blocking on the host: one call into the core that also waits, no Work (1 rank, 4 bytes: 1.63 -> 1.2 us).
            wait(data, n, code, op, bucket)
            return None
        h = self._t.allreduce(data, n, code, place.device, int(op), place.stream, int(bucket), not async_op)
        return self._submit(h, (t,), place, async_op)

    def broadcast(self, tensor: torch.Tensor, root: int = 0, async_op: bool = False) -> Optional[Work]:
        """Copies rank `root`'s `tensor` into every rank's `tensor`."""
        if (
            type(tensor) is torch.Tensor
            and async_op is False
            and type(root) is int
            and 0 <= root < self._size
            and tensor.is_cpu
            and tensor.is_contiguous()
        ):
            # The common call, in one call into the core (see allreduce): 2 ranks, 4 KiB 5.6 -> 4.0 us.
            code, wait = _dtypes.CODES.get(tensor.dtype), self._broadcast_wait
            if code is not None and wait is not None:
                wait(tensor.data_ptr(), tensor.numel(), code, root)
                return None
        async_op = check_bool(async_op, "broadcast: async_op")
        t = check_tensor(tensor, "broadcast: tensor")
        root = self._peer(root, "broadcast", "root")
        place = place_of([t], "broadcast")
        h = self._t.broadcast(
            ptr(t), t.numel(), _dtypes.code(t.dtype, "broadcast"), place.device, root, place.stream, not async_op
        )
        return self._submit(h, (t,), place, async_op)

    def allgather(self, out: torch.Tensor, tensor: torch.Tensor, async_op: bool = False) -> Optional[Work]:
        """out = every rank's `tensor`, rank by rank; out.numel() == size * tensor.numel()."""
        if async_op is False and _plain_host(out) and _plain_host(tensor):
            dtype, n = tensor.dtype, tensor.numel()
            code, wait, out_n = _dtypes.CODES.get(dtype), self._allgather_wait, out.numel()
            if code is not None and wait is not None and out.dtype == dtype and out_n == self._size * n:
                wait(out.data_ptr(), out_n, tensor.data_ptr(), n, code)
                return None
        async_op = check_bool(async_op, "allgather: async_op")
        out, t, place = self._pair(out, tensor, "allgather")
        if out.numel() != self.size * t.numel():
            raise ValueError(
                f"allgather: out has {out.numel()} elements; expected size * tensor.numel() = "
                f"{self.size} * {t.numel()} = {self.size * t.numel()}"
            )
        h = self._t.allgather(
            ptr(out),
            out.numel(),
            ptr(t),
            t.numel(),
            _dtypes.code(t.dtype, "allgather"),
            place.device,
            place.stream,
            not async_op,
        )
        return self._submit(h, (out, t), place, async_op)

    def reduce_scatter(
        self, out: torch.Tensor, tensor: torch.Tensor, op: ReduceOp = SUM, async_op: bool = False
    ) -> Optional[Work]:
        """out = chunk `rank` of the reduction of every rank's `tensor`;
        tensor.numel() == size * out.numel()."""
        if async_op is False and type(op) is ReduceOp and _plain_host(out) and _plain_host(tensor):
            dtype, n, out_n = tensor.dtype, tensor.numel(), out.numel()
            code, wait = _REDUCIBLE_CODES.get(dtype), self._reduce_scatter_wait
            if (
                code is not None
                and wait is not None
                and out.dtype == dtype
                and n == self._size * out_n
                and (op is not AVG or dtype.is_floating_point)
            ):
                wait(out.data_ptr(), out_n, tensor.data_ptr(), n, code, op)
                return None
        async_op = check_bool(async_op, "reduce_scatter: async_op")
        op = check_op(op, "reduce_scatter")
        out, t, place = self._pair(out, tensor, "reduce_scatter", REDUCIBLE)
        self._reducible(t, op, "reduce_scatter")
        if t.numel() != self.size * out.numel():
            raise ValueError(
                f"reduce_scatter: tensor has {t.numel()} elements; expected size * out.numel() = "
                f"{self.size} * {out.numel()} = {self.size * out.numel()} (tensor.numel() must be "
                f"divisible by the communicator size)"
            )
        h = self._t.reduce_scatter(
            ptr(out),
            out.numel(),
            ptr(t),
            t.numel(),
            _dtypes.code(t.dtype, "reduce_scatter"),
            place.device,
            int(op),
            place.stream,
            not async_op,
        )
        return self._submit(h, (out, t), place, async_op)

    def alltoall(self, out: torch.Tensor, tensor: torch.Tensor, async_op: bool = False) -> Optional[Work]:
        """Chunk j of `tensor` goes to rank j; out's chunk i comes from rank i. Both have the same
        numel, divisible by size."""
        async_op = check_bool(async_op, "alltoall: async_op")
        out, t, place = self._pair(out, tensor, "alltoall")
        if out.numel() != t.numel() or t.numel() % self.size:
            raise ValueError(
                f"alltoall: out and tensor must have the same numel, divisible by the communicator size "
                f"{self.size}; got out {out.numel()}, tensor {t.numel()}"
            )
        h = self._t.alltoall(
            ptr(out),
            out.numel(),
            ptr(t),
            t.numel(),
            _dtypes.code(t.dtype, "alltoall"),
            place.device,
            place.stream,
            not async_op,
        )
        return self._submit(h, (out, t), place, async_op)

    def barrier(self, async_op: bool = False) -> Optional[Work]:
        async_op = check_bool(async_op, "barrier: async_op")
        return self._submit(self._t.barrier(not async_op), (), CPU, async_op)

    def _match(self, name: str, numel: int, dtype: torch.dtype, op: ReduceOp) -> Optional[Work]:
        """Op matching alone for compound op `name` ("allreduce_quantized", "allreduce_coalesced") of
        `numel` elements of `dtype`: ranks that called something else here get MismatchError naming
        both. None where the transport matches nothing (one rank; NCCL without PYCOMM_DEBUG)."""
        h = self._t.match(name, numel, _dtypes.code(dtype, name), int(op))
        return None if h is None else Work(h, (), -1)

    # ---- point to point (checks and the shape-carrying ops in pycomm/p2p.py) -----------------------
    def isend(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> Work:
        """Sends `tensor` to rank `dst`; tag in [0, comm.max_tag]. Transport: send."""
        return cast(Work, p2p.fixed_buffer(self, "isend", tensor, dst, tag))

    def irecv(self, tensor: torch.Tensor, src: int, tag: int = 0) -> Work:
        """Receives into `tensor`, which must have the numel and dtype of the matching send (else the
        wait raises MismatchError naming both and leaves `tensor` untouched). src may be
        pycomm.ANY_SOURCE; the Work's `source` names the sender after wait(). Transport: recv."""
        return cast(Work, p2p.fixed_buffer(self, "irecv", tensor, src, tag))

    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        p2p.fixed_buffer(self, "send", tensor, dst, tag, async_op=False)

    def recv(self, tensor: torch.Tensor, src: int, tag: int = 0) -> int:
        """The blocking irecv; returns the sender's rank (useful with src=pycomm.ANY_SOURCE)."""
        return cast(int, p2p.fixed_buffer(self, "recv", tensor, src, tag, async_op=False))

    @property
    def max_tag(self) -> int:
        """The largest tag send/recv accept here (MPI: MPI_TAG_UB); pycomm's own messages use none."""
        return p2p.max_tag(self)

    def send_tensor(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        """Sends `tensor` (any shape up to 8 dimensions, any layout) so that recv_tensor learns its
        shape and dtype from the message header. Transport: send_shaped (see pycomm/p2p.py)."""
        p2p.send_tensor(self, tensor, dst, tag, async_op=False)

    def isend_tensor(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> Work:
        """send_tensor that returns at once; the Work keeps `tensor` (or its contiguous copy) alive."""
        return cast(Work, p2p.send_tensor(self, tensor, dst, tag, async_op=True))

    def recv_tensor(self, src: int = p2p.ANY_SOURCE, tag: int = 0) -> p2p.Received:
        """The next message from `src` (default: any rank) with `tag`, as pycomm.Received(tensor, source,
        tag): a NEW CPU tensor of the sent shape and dtype (a plain send's arrives 1-d). Receives that
        could match the same message get them in call order. Transport: recv_new."""
        return cast(p2p.Received, p2p.recv_tensor(self, src, tag, async_op=False))

    def irecv_tensor(self, src: int = p2p.ANY_SOURCE, tag: int = 0) -> p2p.TensorWork:
        """recv_tensor that returns at once: its TensorWork's wait() returns the Received. Polling
        is_completed() never raises StallError, so a server may wait for requests indefinitely."""
        return cast(p2p.TensorWork, p2p.recv_tensor(self, src, tag, async_op=True))

    def probe(self, src: int = p2p.ANY_SOURCE, tag: int = p2p.ANY_TAG, block: bool = True) -> Optional[p2p.Message]:
        """The next message a recv from `src` with `tag` would get, as pycomm.Message(source, tag,
        shape, dtype), without receiving it; tag may be pycomm.ANY_TAG. block=False: None when none has
        arrived; block=True waits (up to PYCOMM_TIMEOUT, then StallError). Transport: probe."""
        return p2p.probe(self, src, tag, block)

    # ---- sub-communicators -------------------------------------------------------------------
    def dup(self) -> "Communicator":
        """A second communicator over the same ranks, with its own op queue and message matching: a
        blocking recv or a collective on one never waits behind the other's ops (e.g. a pipeline's
        forward and backward channels, or a server's control and data channels). Collective.
        Transport: dup (MPI_Comm_dup; other transports default to split(0, rank))."""
        settings.apply()  # the environment as it is now, for the new communicator (as split does)
        t = self._t.dup() if hasattr(self._t, "dup") else self._t.split(0, self.rank)
        return Communicator(t, f"{self.name}.dup()")

    def split(self, color: int, key: Optional[int] = None) -> Optional["Communicator"]:
        """Ranks passing the same `color` form a communicator, ordered by `key` (default: rank).
        A negative color joins none and returns None. Collective."""
        color = check_int(color, "split: color", min_value=INT32_MIN, max_value=INT32_MAX)
        key = check_int(self.rank if key is None else key, "split: key", min_value=INT32_MIN, max_value=INT32_MAX)
        settings.apply()  # the environment as it is now, for the new communicator
        t = self._t.split(color, key)
        return None if t is None else Communicator(t, f"{self.name}.split({color})")

    def split_by_node(self) -> tuple["Communicator", "Communicator"]:
        """(intra, inter): the ranks on this node, and the ranks with this local rank on every node
        (for hierarchical reductions and hybrid sharding). Collective on the first call; later calls
        return the same pair (settings as read at the first call).

        PYCOMM_RANKS_PER_NODE=k declares nodes of k consecutive ranks instead of the machine's real
        ones (to exercise node-aware code on one machine); k must divide the size."""
        if self._by_node is not None:
            return self._by_node
        per_node = ranks_per_node(self.size)
        if per_node is None:
            settings.apply()
            intra: Optional[Communicator] = Communicator(self._t.split_shared(self.rank), f"{self.name}.intra")
        else:
            intra = self.split(self.rank // per_node, self.rank)
        inter = None if intra is None else self.split(intra.rank, self.rank)
        if intra is None or inter is None:  # a non-negative color always joins a communicator
            raise PycommError(
                f"split_by_node: the {self.backend} transport of {self!r} returned no "
                f"{'intra' if intra is None else 'inter'}-node communicator for a non-negative color"
            )
        intra.name, inter.name = f"{self.name}.intra", f"{self.name}.inter"
        self._by_node = (intra, inter)
        return self._by_node

    def shutdown(self) -> None:
        """Completes submitted ops and releases the transport; later ops raise PycommError."""
        self._t.shutdown()
        with self._in_flight_lock:
            self._in_flight = []


def ranks_per_node(size: int) -> Optional[int]:
    """The node size PYCOMM_RANKS_PER_NODE declares, or None where it is unset."""
    value: Optional[int] = settings.get("PYCOMM_RANKS_PER_NODE")
    if value is not None and size % value:
        divisors = ", ".join(str(k) for k in range(1, size + 1) if size % k == 0)
        raise ValueError(
            f"PYCOMM_RANKS_PER_NODE={value} does not divide this communicator's {size} ranks into "
            f"whole nodes: expected a divisor of {size} ({divisors}), or unset it to group ranks by "
            f"the machine's real nodes"
        )
    return value
