"""Point-to-point messages for pipelines and servers: tensors whose receiver does not know their
shape, dtype or sender (send_tensor / recv_tensor), receives from any source, probes, and the
checks of peers and tags shared with Communicator.send / recv.

A transport provides them through these primitives (pycomm._C.Transport has them all; another
transport may provide some and is refused by name for the rest):
- send_shaped(ptr, numel, dtype, device, shape, dst, tag, stream, caller_waits) -> work: a send
  whose message header carries the shape (MPI: the 96-byte header in front of every payload);
- recv_new(src, tag, caller_waits) -> work whose `received` is (source, tag, dtype, count, shape,
  data) once complete, `data` a buffer holding the payload (MPI: MPI_Improbe + MPI_Mrecv of the
  header, then MPI_Irecv of the payload from the header's source);
- recv(...) with src = ANY_SOURCE, whose work's `received` names the source;
- probe(src, tag, block) -> None or that tuple without data (MPI: the header is taken with
  MPI_Improbe + MPI_Mrecv and kept for the receive that will match it);
- any_source (bool) and max_tag (int) attributes; dup() -> transport."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import check_tensor, place_of, ptr
from pycomm._validate import check_bool, check_int
from pycomm.errors import PycommError
from pycomm.work import Work

if TYPE_CHECKING:
    from pycomm.communicator import Communicator

ANY_SOURCE = -1  # receive (or probe) from whichever rank's message is matched first
ANY_TAG = -1  # probe only: a message of any tag
MAX_DIMS = 8  # dimensions a send_tensor header carries
GUARANTEED_MAX_TAG = 32767  # MPI_TAG_UB is at least this everywhere: the bound of a transport that names none

_DTYPES = {code: dtype for dtype, code in _dtypes.CODES.items()}


class Message(NamedTuple):
    """What probe() saw: the next message a recv from `source` with `tag` would get."""

    source: int
    tag: int
    shape: tuple[int, ...]
    dtype: torch.dtype


class Received(NamedTuple):
    """A message taken by recv_tensor: a new CPU tensor, and who sent it with which tag."""

    tensor: torch.Tensor
    source: int
    tag: int


class TensorWork(Work):
    """The Work of irecv_tensor: wait() returns the Received message."""

    __slots__ = ()

    def wait(self) -> Received:  # type: ignore[override]
        super().wait()
        return received_tensor(self._handle)


# ---- checks -----------------------------------------------------------------------------------
def max_tag(comm: "Communicator") -> int:
    """The largest tag `comm`'s transport accepts (MPI: its MPI_TAG_UB attribute)."""
    return getattr(comm._t, "max_tag", GUARANTEED_MAX_TAG)


def check_tag(comm: "Communicator", tag: object, what: str) -> int:
    return check_int(tag, f"{what}: tag", min_value=0, max_value=max_tag(comm))


def check_dst(comm: "Communicator", dst: object, what: str) -> int:
    dst = check_int(dst, f"{what}: dst", min_value=None, max_value=None)
    if dst == ANY_SOURCE:
        raise ValueError(f"{what}: dst must be a rank in [0, {comm.size}); ANY_SOURCE (-1) is only for receives")
    if not 0 <= dst < comm.size:
        raise ValueError(f"{what}: dst must be a rank in [0, {comm.size}), got {dst}")
    return dst


def check_src(comm: "Communicator", src: object, what: str) -> int:
    src = check_int(src, f"{what}: src", min_value=None, max_value=None)
    if src == ANY_SOURCE:
        if not getattr(comm._t, "any_source", False):
            raise PycommError(
                f"{what}: backend {comm.backend!r} has no receive from any source (src=ANY_SOURCE)"
                + (": NCCL matches messages only between a known pair of ranks" if comm.backend == "nccl" else "")
                + "; name the sender, or use an MPI communicator for such messages"
            )
        return src
    if not 0 <= src < comm.size:
        raise ValueError(f"{what}: src must be a rank in [0, {comm.size}) or pycomm.ANY_SOURCE (-1), got {src}")
    return src


def primitive(comm: "Communicator", name: str, what: str) -> Any:
    """The transport's method `name`, or a PycommError naming the backend that lacks it."""
    fn = getattr(comm._t, name, None)
    if fn is None:
        raise PycommError(f"{what}: backend {comm.backend!r} does not provide it (its transport has no {name}())")
    return fn


# ---- the ops ----------------------------------------------------------------------------------
def fixed_buffer(
    comm: "Communicator", kind: str, tensor: object, peer: object, tag: object, async_op: bool = True
) -> Optional[Work] | int:
    """send / isend / recv / irecv of a tensor whose shape both sides know; a blocking recv returns
    the sender's rank. Transport: send, recv."""
    t = check_tensor(tensor, f"{kind}: tensor")
    sends = kind.endswith("send")
    peer = check_dst(comm, peer, kind) if sends else check_src(comm, peer, kind)
    tag = check_tag(comm, tag, kind)
    place = place_of([t], kind)
    fn = comm._t.send if sends else comm._t.recv
    h = fn(ptr(t), t.numel(), _dtypes.code(t.dtype, kind), place.device, peer, tag, place.stream, not async_op)
    if async_op or sends:
        return comm._submit(h, (t,), place, async_op)
    h.wait(place.stream, core().stall_timeout())
    return received_source(h, peer)


def send_tensor(comm: "Communicator", tensor: object, dst: object, tag: object, async_op: bool) -> Optional[Work]:
    what = "isend_tensor" if async_op else "send_tensor"
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() > MAX_DIMS:
        raise ValueError(
            f"{what}: tensor has {tensor.dim()} dimensions (shape {tuple(tensor.shape)}); at most "
            f"{MAX_DIMS} fit in the message header (reshape it, and back on the receiver)"
        )
    code = _dtypes.code(tensor.dtype, f"{what}: tensor")
    dst = check_dst(comm, dst, what)
    tag = check_tag(comm, tag, what)
    t = tensor.contiguous()  # a copy for non-contiguous input, kept alive by the Work until sent
    place = place_of([t], what)
    send = primitive(comm, "send_shaped", what)
    h = send(ptr(t), t.numel(), code, place.device, list(t.shape), dst, tag, place.stream, not async_op)
    return comm._submit(h, (t,), place, async_op)


def recv_tensor(comm: "Communicator", src: object, tag: object, async_op: bool) -> Received | TensorWork:
    what = "irecv_tensor" if async_op else "recv_tensor"
    src = check_src(comm, src, what)
    tag = check_tag(comm, tag, what)
    h = primitive(comm, "recv_new", what)(src, tag, not async_op)
    if async_op:
        return TensorWork(h, (), -1)
    h.wait(0, core().stall_timeout())
    return received_tensor(h)


def received_tensor(handle: Any) -> Received:
    """The Received of a completed recv_new: its payload as a tensor of the sent shape and dtype."""
    source, tag, code, count, shape, data = handle.received
    dtype = _DTYPES[code]
    shape = (count,) if shape is None else tuple(shape)
    if count == 0:
        return Received(torch.empty(shape, dtype=dtype), source, tag)
    flat = torch.frombuffer(data, dtype=torch.uint8)  # no copy: the tensor keeps `data` alive
    return Received(flat.view(dtype).reshape(shape), source, tag)


def received_source(handle: Any, asked: int) -> int:
    """The sender of a completed fixed-buffer recv (`asked` where the transport does not say)."""
    got = getattr(handle, "received", None)
    return asked if got is None else got[0]


def probe(comm: "Communicator", src: object, tag: object, block: object) -> Optional[Message]:
    src = check_src(comm, src, "probe")
    tag = check_int(tag, "probe: tag", min_value=ANY_TAG, max_value=max_tag(comm))
    block = check_bool(block, "probe: block")
    got = primitive(comm, "probe", "probe")(src, tag, block)
    if got is None:
        return None
    source, msg_tag, code, count, shape, _ = got
    return Message(source, msg_tag, (count,) if shape is None else tuple(shape), _DTYPES[code])
