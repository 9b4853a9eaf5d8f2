"""PycommProcessGroup: a torch.distributed ProcessGroup whose collectives and point-to-point ops run on a
pycomm Communicator, so torch.distributed code (DDP, FSDP2, pipelining, DeviceMesh) gets pycomm's
transports, op matching (MismatchError), stall reports, flight recorder and tracing unchanged.

Each op stages non-contiguous tensors (and list arguments) in contiguous buffers, submits pycomm's op
with async_op=True and returns a PycommWork whose finishing step copies results back. Ops pycomm cannot
run raise NotImplementedError naming the op. CPU tensors only (the backend registers for "cpu")."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from pycomm.communicator import Communicator
from pycomm.torch_backend import alltoallv, reduce_ops
from pycomm.torch_backend.work import PycommWork, Waiter

NAME = "pycomm"
_MESH_DESC = "mesh_"  # how DeviceMesh describes the group of one of its dimensions ("mesh_" + its name)


def _staged(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when pycomm can use its memory, else a contiguous copy."""
    return t if t.is_contiguous() else t.contiguous()


def _one(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
    if len(tensors) != 1:
        raise ValueError(
            f"pycomm backend: {what} takes one tensor per process (one device per rank), got {len(tensors)}"
        )
    t = tensors[0]
    if t.device.type != "cpu":
        raise ValueError(f"pycomm backend: {what} moves CPU tensors only, got a tensor on {t.device}")
    return t


def _copy_back(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Callable[[], None]:
    """The finishing step: each (user tensor, staging buffer) pair whose buffer is a copy gets it back."""
    todo = [(dst, src) for dst, src in pairs if dst is not src]

    def finish() -> None:
        for dst, src in todo:
            dst.copy_(src.view(dst.shape))

    return finish


class PycommProcessGroup(dist.ProcessGroup):
    """torch.distributed's view of the pycomm Communicator `comm` (its rank and size are the group's).
    `owned`: the group made `comm` for itself (a sub-communicator), so shutting the group down shuts it."""

    def __init__(self, comm: Communicator, owned: bool = False) -> None:
        super().__init__(comm.rank, comm.size)
        self.comm = comm
        self._owned = owned
        self._waiter = Waiter(comm.name)
        self._group_name = self._group_desc = ""

    # ---- torch's bookkeeping ---------------------------------------------------------------------
    # torch reads a group's name and description back from its C++ backends, which a Python process group has
    # none of: kept here (DeviceMesh and the functional collectives look groups up by name)
    def _set_group_name(self, name: str) -> None:
        self._group_name = name
        super()._set_group_name(name)

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc
        if self._owned and desc.startswith(_MESH_DESC):  # a DeviceMesh dimension: traces show its name
            self.comm.mesh_dim = desc[len(_MESH_DESC) :]
        super()._set_group_desc(desc)

    @property
    def group_name(self) -> str:
        return self._group_name

    @property
    def group_desc(self) -> str:
        return self._group_desc

    def getBackendName(self) -> str:
        return NAME

    def name(self) -> str:
        return NAME

    def _work(
        self, what: str, works: Sequence[Any], result: list[torch.Tensor], finish: Optional[Callable[[], None]] = None
    ) -> PycommWork:
        return PycommWork(what, [w for w in works if w is not None], result, finish, self._waiter)

    def shutdown(self) -> None:
        self._waiter.stop()
        if self._owned:
            self.comm.shutdown()

    # ---- collectives -----------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> PycommWork:
        t = _one(tensors, "allreduce")
        op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        buf = _staged(t)
        mine = reduce_ops.native(op)
        if mine is not None:
            return self._work(
                "allreduce", [self.comm.allreduce(buf, mine, async_op=True)], tensors, _copy_back([(t, buf)])
            )
        # PRODUCT / bitwise: every rank's values gathered through pycomm, reduced here
        reduce = reduce_ops.gathered(op, t.dtype, "allreduce")
        rows = torch.empty((self.comm.size, buf.numel()), dtype=buf.dtype)
        work = self.comm.allgather(rows, buf, async_op=True)

        def finish() -> None:
            t.copy_(reduce(rows).view(t.shape))

        return self._work("allreduce", [work], tensors, finish)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> PycommWork:
        works = [self.allreduce([t], opts) for t in tensors]
        return self._work("allreduce_coalesced", [], tensors, _all_of(works))

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> PycommWork:
        t = _one(tensors, "broadcast")
        root = 0 if opts is None else opts.rootRank
        buf = _staged(t)
        return self._work("broadcast", [self.comm.broadcast(buf, root, async_op=True)], tensors, _copy_back([(t, buf)]))

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> PycommWork:
        out, inp = _staged(output), _staged(input)
        return self._work(
            "_allgather_base", [self.comm.allgather(out, inp, async_op=True)], [output], _copy_back([(output, out)])
        )

    def allgather(
        self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor], opts: Any = None
    ) -> PycommWork:
        inp = _staged(_one(input_tensors, "allgather"))
        outs = _one_list(output_tensors, self.comm.size, inp.numel(), "allgather")
        flat = torch.empty(self.comm.size * inp.numel(), dtype=inp.dtype)
        work = self.comm.allgather(flat, inp, async_op=True)
        return self._work("allgather", [work], outs, _copy_back(list(zip(outs, flat.chunk(self.comm.size)))))

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> PycommWork:
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._work("allgather_into_tensor_coalesced", [], outputs, _all_of(works))

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> PycommWork:
        op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        mine = reduce_ops.native(op)
        if mine is None:
            raise NotImplementedError(
                f"pycomm backend: reduce_scatter with reduce op {reduce_ops.name_of(op)} is not "
                f"supported; it supports SUM, AVG, MIN, MAX"
            )
        out, inp = _staged(output), _staged(input)
        return self._work(
            "_reduce_scatter_base",
            [self.comm.reduce_scatter(out, inp, mine, async_op=True)],
            [output],
            _copy_back([(output, out)]),
        )

    def reduce_scatter(
        self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]], opts: Any = None
    ) -> PycommWork:
        out = _one(output_tensors, "reduce_scatter")
        ins = _one_list(input_tensors, self.comm.size, out.numel(), "reduce_scatter")
        flat = torch.cat([i.reshape(-1) for i in ins])
        return self._reduce_scatter_base(out, flat, opts)

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> PycommWork:
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._work("reduce_scatter_tensor_coalesced", [], outputs, _all_of(works))

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> PycommWork:
        n = self.comm.size
        if (
            not output_split_sizes
            and not input_split_sizes
            and output.numel() == input.numel()
            and input.numel() % n == 0
        ):  # equal chunks: pycomm's alltoall as it is
            out, inp = _staged(output), _staged(input)
            return self._work(
                "alltoall_base", [self.comm.alltoall(out, inp, async_op=True)], [output], _copy_back([(output, out)])
            )
        row = alltoallv.row_numel(output, input)
        sends = alltoallv.split_sizes(input, input_split_sizes, n, "input")
        receives = alltoallv.split_sizes(output, output_split_sizes, n, "output")
        work, received = alltoallv.exchange(self.comm, _staged(input), sends, output.numel(), receives, row)

        def finish() -> None:
            output.copy_(torch.cat(received()).view(output.shape))

        return self._work("alltoall_base", [work], [output], finish)

    def alltoall(
        self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor], opts: Any = None
    ) -> PycommWork:
        n = self.comm.size
        if len(input_tensors) != n or len(output_tensors) != n:
            raise ValueError(
                f"pycomm backend: all_to_all takes {n} input and {n} output tensors (one per rank of "
                f"the group), got {len(input_tensors)} and {len(output_tensors)}"
            )
        flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
        work, received = alltoallv.exchange(
            self.comm,
            flat_in,
            [t.numel() for t in input_tensors],
            sum(t.numel() for t in output_tensors),
            [t.numel() for t in output_tensors],
            1,
        )

        def finish() -> None:
            for dst, src in zip(output_tensors, received()):
                dst.copy_(src.view(dst.shape))

        return self._work("alltoall", [work], output_tensors, finish)

    def barrier(self, opts: Any = None) -> PycommWork:
        return self._work("barrier", [self.comm.barrier(async_op=True)], [])

    # ---- point to point --------------------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dstRank: int, tag: int) -> PycommWork:  # noqa: N803 (torch's names)
        buf = _staged(_one(tensors, "send"))
        return self._work("send", [self.comm.isend(buf, dstRank, tag)], tensors)

    def recv(self, tensors: list[torch.Tensor], srcRank: int, tag: int) -> PycommWork:  # noqa: N803
        t = _one(tensors, "recv")
        buf = _staged(t)
        return self._work("recv", [self.comm.irecv(buf, srcRank, tag)], tensors, _copy_back([(t, buf)]))

    # torch 2.13's Python API calls these names; C++ callers (DDP, functional collectives) the ones above
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # ---- what pycomm does not run -----------------------------------------------------------------
    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> PycommWork:
        raise _unsupported("recv from any source (dist.recv without src)")

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> PycommWork:
        raise _unsupported("reduce (use all_reduce)")

    def gather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> PycommWork:
        raise _unsupported("gather (use all_gather)")

    def scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> PycommWork:
        raise _unsupported("scatter (use broadcast or all_to_all)")

    def monitored_barrier(self, *args: Any, **kwargs: Any) -> None:
        raise _unsupported("monitored_barrier (use barrier: pycomm's stall report names the missing ranks' ops)")


def _all_of(works: Sequence[PycommWork]) -> Callable[[], None]:
    """The finishing step of a coalesced op: each part waited (its error raised as it is)."""

    def finish() -> None:
        for w in works:
            w.wait()

    return finish


def _one_list(lists: Sequence[Sequence[torch.Tensor]], size: int, numel: int, what: str) -> list[torch.Tensor]:
    if len(lists) != 1 or len(lists[0]) != size or any(t.numel() != numel for t in lists[0]):
        raise ValueError(
            f"pycomm backend: {what} takes one list of {size} tensors of {numel} elements each (one per "
            f"rank); got {[[t.numel() for t in ts] for ts in lists]}"
        )
    return list(lists[0])


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(f"pycomm backend: {what} is not supported by the pycomm backend")
