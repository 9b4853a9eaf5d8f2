"""The gloo transport: the interface pycomm._C's transports give Communicator (ops on raw host buffers,
each returning a handle with wait(stream, timeout_s) / synchronize / is_completed / info), carried out by
torch.distributed's ProcessGroupGloo. It needs no MPI, so it connects CPU ranks that MPI cannot wire
up: torchrun, srun --mpi=none, RANK/WORLD_SIZE set by hand (pycomm/gloo/backend.py starts it).

- Order: the process group runs on one gloo thread, so one communicator's collectives run in
  submission order, as on the core's queue. Point-to-point ops bypass that queue (gloo posts them at once).
- Buffers: Communicator hands over (address, count, dtype code) of tensors it keeps alive until the op
  completes; they are seen here as tensors on the same memory, never copied.
- Point-to-point messages carry a small header (count, dtype, sender; pycomm/gloo/p2p.py), so a receive
  whose tensor does not fit its send raises MismatchError instead of gloo aborting the process.
- Op matching (pycomm/gloo/matching.py): every collective first exchanges its signature on a private
  gloo group, so ranks that disagree (size, dtype, reduce op, root, kind) get MismatchError naming both
  ranks' ops, as on MPI, and no data moves (gloo itself would abort the process, or deliver another
  root's data). Compound ops (allreduce_quantized, allreduce_coalesced) are matched under their own name.
- Not here: GPU tensors (use backend "nccl")."""

from __future__ import annotations

import atexit
import datetime
import weakref
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, BroadcastOptions, ReduceScatterOptions
from torch.distributed import PrefixStore, ProcessGroupGloo, Store
from torch.distributed import ReduceOp as TorchReduceOp

from pycomm import op_stats, peer_hosts, tracing
from pycomm._dtypes import CODES, DTYPES
from pycomm.errors import PycommError, StallError
from pycomm.gloo import p2p as gloo_p2p
from pycomm.gloo.matching import OpMatcher
from pycomm.gloo.work import GlooWork, describe
from pycomm.ops import ReduceOp
from pycomm.tracing import flight_recorder

_OPEN: "weakref.WeakSet[GlooTransport]" = weakref.WeakSet()  # shut down at exit (close_all)
TORCH_OPS = {
    ReduceOp.SUM: TorchReduceOp.SUM,
    ReduceOp.AVG: TorchReduceOp.AVG,
    ReduceOp.MAX: TorchReduceOp.MAX,
    ReduceOp.MIN: TorchReduceOp.MIN,
}
NO_TIMEOUT = datetime.timedelta(days=365)
P2P_NAMES = ("send", "recv", "send_tensor", "recv_tensor")  # gloo needs a bound: PYCOMM_TIMEOUT <= 0 asks for none


class _HostMemory:
    """`nbytes` bytes at `address`, seen by numpy (and so by torch) without a copy."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}


def host_tensor(address: int, count: int, dtype_code: int) -> torch.Tensor:
    """The caller's buffer (address 0 when empty) as a 1-D tensor of `count` elements on its memory."""
    dtype = DTYPES[dtype_code]
    if count == 0:
        return torch.empty(0, dtype=dtype)
    return torch.from_numpy(np.asarray(_HostMemory(address, count * dtype.itemsize))).view(dtype)


def timedelta(seconds: float) -> datetime.timedelta:
    # <= 0 (the core's "no timeout") and inf (the store's) both ask for none: gloo's longest bound
    return datetime.timedelta(seconds=seconds) if 0 < seconds < NO_TIMEOUT.total_seconds() else NO_TIMEOUT


def process_group(store: Store, rank: int, size: int, timeout_s: float, device: Any) -> ProcessGroupGloo:
    """A gloo group of `size` ranks meeting through `store` (blocks until all have joined)."""
    options = ProcessGroupGloo._Options()
    options._devices = [device]
    options._timeout = timedelta(timeout_s)
    options._threads = 1  # one communicator's collectives run in submission order (pycomm's contract)
    return ProcessGroupGloo(store, rank, size, options)


class GlooTransport:
    """A communicator's ranks over one ProcessGroupGloo. `hosts`: a host id per rank (split_by_node)."""

    backend = "gloo"
    any_source = True  # receives from pycomm.ANY_SOURCE: gloo's recv_anysource of the header
    oversubscribed = None  # gloo's own schedules do not key on it

    def __init__(
        self,
        store: Store,
        pg: ProcessGroupGloo,
        rank: int,
        size: int,
        hosts: list[int],
        prefix: str,
        timeout_s: float,
        device: Any,
    ) -> None:
        self._store, self._pg, self._prefix, self._device = store, pg, prefix, device
        self.rank, self.size, self._hosts, self._timeout_s = rank, size, hosts, timeout_s
        self.local_rank = hosts[:rank].count(hosts[rank])
        self.local_size = hosts.count(hosts[rank])
        self._seq = 0
        self._splits = 0
        from pycomm._build import core

        self.trace_comm_id = core().trace_new_comm_id()
        self._broken: Optional[str] = None
        self.label = f"gloo communicator (rank {rank} of {size})"  # as the core names MPI's in its errors
        self.max_tag = gloo_p2p.MAX_TAG
        self.p2p_order = gloo_p2p.Ordering()
        # the signatures' own group: its keys under this communicator's prefix, apart from the data's
        self._matching = OpMatcher(
            self, process_group(PrefixStore(f"{prefix}/matching", store), rank, size, timeout_s, device), timeout_s
        )
        from pycomm.gloo.progress import Progress

        self._progress = Progress(store, prefix, rank, size)  # where this rank is, for the peers' stall reports
        _OPEN.add(self)

    # ---- bookkeeping --------------------------------------------------------------------------
    def _begin(
        self,
        name: str,
        count: int,
        dtype_code: int,
        device: int,
        *,
        nbytes: Optional[int] = None,
        op: int = -1,
        peer: int = -1,
        tag: int = -1,
        bucket: int = -1,
    ) -> dict:
        """The op's info, after checking that this communicator can run it."""
        self.check_usable(name)
        if device >= 0:
            raise PycommError(
                f"{name}: backend 'gloo' moves CPU tensors only, got a tensor on GPU {device}; use "
                f"backend='nccl' for GPU tensors (or move them to the CPU)"
            )
        self._seq += 1
        item = DTYPES[dtype_code].itemsize
        info = {
            "name": name,
            "seq": self._seq,
            "count": count,
            "dtype": str(DTYPES[dtype_code]).replace("torch.", ""),
            "dtype_code": dtype_code,
            "bytes": count * item if nbytes is None else nbytes,
            "peer": peer,
            "tag": tag,
            "bucket": bucket,
            "redop": op,
            "op": ReduceOp(op).name if op >= 0 else "",
            "bus_factor": op_stats.bus_factor(name, self.size),
        }
        info["describe"] = describe(info)
        if tracing.ACTIVE:
            info["trace"] = dict(
                comm_id=self.trace_comm_id,
                rank=self.rank,
                size=self.size,
                seq=self._seq,
                count=count,
                dtype=dtype_code,
                nbytes=info["bytes"],
                redop=op,
                algorithm="gloo",
                peer=peer,
                tag=tag,
                bucket=bucket,
                collective=name not in P2P_NAMES,
            )
            tracing.record_phase(name, phase="queued", **info["trace"])
        return info

    def check_usable(self, name: str) -> None:
        if self._broken is not None:
            raise PycommError(f"{name}: the {self.label} is broken and unusable: {self._broken}")

    def break_with(self, reason: str) -> None:
        """Later ops raise PycommError naming `reason` (the first one kept)."""
        self._broken = self._broken or reason

    def fail(self, info: dict, error: Optional[BaseException], timeout_s: float = 0.0) -> PycommError:
        """The error of op `info` (a stall when `error` is None); the communicator is unusable afterwards."""
        where = f"on rank {self.rank} of {self.size} (backend 'gloo')"
        if error is None or "timed out" in str(error).lower():
            limit = f"{timeout_s:g} s" if timeout_s > 0 else f"gloo's timeout ({self._timeout_s:g} s)"
            who = (
                self._progress.laggards(info["name"], info["seq"], info["collective_index"])
                if "collective_index" in info
                else "a rank has not reached it"
            )
            msg = f"{info['describe']} did not complete within {limit} {where}: {who} (PYCOMM_TIMEOUT)"
            err: PycommError = StallError(msg + flight_recorder.on_stall(msg, self.trace_comm_id))
        else:
            err = PycommError(
                f"{info['describe']} failed {where}: {error}" + peer_hosts.describe(str(error), self._hosts)
            )
        self.break_with(str(err))
        return err

    def _matched(self, info: dict, data_op: Callable[[], Sequence[Any]] = lambda: (), keep: tuple = ()) -> GlooWork:
        """A collective: `data_op` submits its data once every rank's signature matched (gloo/matching.py)."""
        info["collective_index"] = self._progress.collective(info["name"], info["seq"])
        return self._matching.submit(info, data_op, keep)

    # ---- collectives (Communicator has checked sizes, dtypes and peers) ----------------------
    def allreduce(self, p: int, n: int, dt: int, dev: int, op: int, stream: int, bucket: int, waits: bool) -> GlooWork:
        info = self._begin("allreduce", n, dt, dev, op=op, bucket=bucket)
        t = host_tensor(p, n, dt)
        opts = AllreduceOptions()
        opts.reduceOp = TORCH_OPS[ReduceOp(op)]
        return self._matched(info, lambda: [self._pg.allreduce([t], opts)] if n else [], (t,))

    def broadcast(self, p: int, n: int, dt: int, dev: int, root: int, stream: int, waits: bool) -> GlooWork:
        info = self._begin("broadcast", n, dt, dev, peer=root)
        t = host_tensor(p, n, dt)
        opts = BroadcastOptions()
        opts.rootRank, opts.rootTensor = root, 0
        return self._matched(info, lambda: [self._pg.broadcast([t], opts)] if n else [], (t,))

    def allgather(self, po: int, no: int, pi: int, ni: int, dt: int, dev: int, stream: int, waits: bool) -> GlooWork:
        info = self._begin("allgather", ni, dt, dev, nbytes=no * DTYPES[dt].itemsize)
        out, t = host_tensor(po, no, dt), host_tensor(pi, ni, dt)
        return self._matched(
            info, lambda: [self._pg._allgather_base(out, t, AllgatherOptions())] if ni else [], (out, t)
        )

    def reduce_scatter(
        self, po: int, no: int, pi: int, ni: int, dt: int, dev: int, op: int, stream: int, waits: bool
    ) -> GlooWork:
        info = self._begin("reduce_scatter", ni, dt, dev, op=op)
        out, t = host_tensor(po, no, dt), host_tensor(pi, ni, dt)
        opts = ReduceScatterOptions()
        opts.reduceOp = TORCH_OPS[ReduceOp(op)]
        return self._matched(info, lambda: [self._pg._reduce_scatter_base(out, t, opts)] if no else [], (out, t))

    def alltoall(self, po: int, no: int, pi: int, ni: int, dt: int, dev: int, stream: int, waits: bool) -> GlooWork:
        info = self._begin("alltoall", ni, dt, dev)
        out, t = host_tensor(po, no, dt), host_tensor(pi, ni, dt)
        return self._matched(info, lambda: [self._pg.alltoall_base(out, t, [], [])] if ni else [], (out, t))

    def barrier(self, waits: bool) -> GlooWork:
        info = self._begin("barrier", 0, CODES[torch.uint8], -1)
        return self._matched(info, lambda: [self._pg.barrier()])

    def match(self, name: str, n: int, dt: int, op: int) -> GlooWork:
        """Op matching alone, under compound op `name`'s own name (its parts are matched again)."""
        info = self._begin(name, n, dt, -1, op=op)
        info["bus_factor"] = 0.0  # it moves no data (as the MPI transport counts it): stats' busbw stays the parts'
        return self._matched(info)

    # ---- point to point (framing in pycomm/gloo/p2p.py; the contract in pycomm/p2p.py) ------
    def send(self, p: int, n: int, dt: int, dev: int, dst: int, tag: int, stream: int, waits: bool) -> GlooWork:
        info = self._begin("send", n, dt, dev, peer=dst, tag=tag)
        return gloo_p2p.send(self, self._pg, info, host_tensor(p, n, dt), dst, tag)

    def send_shaped(
        self, p: int, n: int, dt: int, dev: int, shape: list[int], dst: int, tag: int, stream: int, waits: bool
    ) -> GlooWork:
        info = self._begin("send_tensor", n, dt, dev, peer=dst, tag=tag)
        return gloo_p2p.send(self, self._pg, info, host_tensor(p, n, dt), dst, tag, shape)

    def recv(self, p: int, n: int, dt: int, dev: int, src: int, tag: int, stream: int, waits: bool) -> GlooWork:
        info = self._begin("recv", n, dt, dev, peer=src, tag=tag)
        return gloo_p2p.recv(self, self._pg, info, host_tensor(p, n, dt), src, tag)

    def recv_new(self, src: int, tag: int, waits: bool) -> GlooWork:
        info = self._begin("recv_tensor", 0, CODES[torch.uint8], -1, peer=src, tag=tag)
        return gloo_p2p.recv_new(self, self._pg, info, src, tag)

    # ---- sub-communicators -------------------------------------------------------------------
    def gather_at_creation(self, mine: Sequence[int]) -> list[int]:
        """Every rank's `mine`, rank by rank, outside the op count and stats (the core transports' method of
        that name: pycomm/rank_agreement.py compares the settings every rank must share with it)."""
        ours = torch.tensor(list(mine), dtype=torch.int64)
        table = torch.empty(len(mine) * self.size, dtype=torch.int64)
        self._pg._allgather_base(table, ours, AllgatherOptions()).wait(timedelta(self._timeout_s))
        return table.tolist()

    def split(self, color: int, key: int) -> Optional["GlooTransport"]:
        return self._split("split", color, key)

    def split_shared(self, key: int) -> "GlooTransport":
        mine = self._hosts[self.rank]
        sub = self._split("split_shared", self._hosts.index(mine), key)
        assert sub is not None
        return sub

    def _split(self, name: str, color: int, key: int) -> Optional["GlooTransport"]:
        """Collective: every rank's (color, key, rank, host) gathered, then a new gloo group per color
        meeting under its own store prefix (the same on every member: splits are numbered alike)."""
        info = self._begin(name, 4 * self.size, CODES[torch.int64], -1)
        mine = torch.tensor([color, key, self.rank, self._hosts[self.rank]], dtype=torch.int64)
        table = torch.empty(4 * self.size, dtype=torch.int64)
        work = self._matched(info, lambda: [self._pg._allgather_base(table, mine, AllgatherOptions())], (table, mine))
        work.wait(0, self._timeout_s)
        self._splits += 1
        if color < 0:
            return None
        rows = [tuple(r) for r in table.view(self.size, 4).tolist()]
        members = sorted((k, r) for c, k, r, _ in rows if c == color)
        ranks = [r for _, r in members]
        prefix = f"{self._prefix}/split{self._splits}/{color}"
        pg = process_group(
            PrefixStore(prefix, self._store), ranks.index(self.rank), len(ranks), self._timeout_s, self._device
        )
        return GlooTransport(
            self._store,
            pg,
            ranks.index(self.rank),
            len(ranks),
            [rows[r][3] for r in ranks],
            prefix,
            self._timeout_s,
            self._device,
        )

    def shutdown(self) -> None:
        """Later ops raise PycommError. Ops already submitted complete (gloo's thread drains its queue),
        then the group is shut down and released here: a gloo group left to interpreter teardown
        sometimes ends the process in std::terminate (as torch's own does without destroy_process_group)."""
        pg = self._pg
        if pg is not None:
            self._matching.close(drain=self._broken is None)  # queued ops have their data submitted first
        self.break_with("it was shut down (Communicator.shutdown or pycomm.finalize)")
        self._pg = None
        self._progress.close()
        if pg is not None:
            _OPEN.discard(self)
            try:
                pg.shutdown()
            except RuntimeError:  # a peer already gone: nothing left to release cleanly
                pass
            self._matching.shutdown()

    def abort(self, reason: str) -> None:
        self._broken = f"aborted: {reason}"
        self._progress.close()
        self._matching.abort()
        try:
            if self._pg is not None:
                self._pg.abort()
        except RuntimeError:  # not every torch lets a gloo group abort; the process ends right after anyway
            pass


@atexit.register
def close_all() -> None:
    """Every gloo group still open (sub-communicators too, which pycomm.finalize does not track)."""
    for transport in list(_OPEN):
        transport.shutdown()
