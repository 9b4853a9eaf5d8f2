"""Compression codecs for communication: pycomm.Int8Codec, pycomm.Int4Codec and pycomm.OneBitCodec.

A codec turns a float tensor into an `Encoded` payload (a data tensor and one fp32 scale per block
of `block` elements) and back. The API is small and stable because collectives build on it:

    codec = pycomm.Int8Codec(block=256)
    enc = codec.encode(x, residual=e)      # e (fp32, optional) is error feedback, updated in place
    codec.decode(enc, out)                 # out = decoded (any float dtype)
    codec.decode_accumulate(enc, acc)      # acc += decoded (fp32 accumulator of a reduce step)
    codec.wire_bytes(numel)                # bytes of enc.data + enc.scales for numel elements
    codec.error_bound(v)                   # per-element bound on |v - decode(encode(v))|
    codec.slice(enc, start, stop)          # views of the encoding of x[start:stop] (block aligned)
    codec.empty(numel, device)             # an Encoded to receive into
    codec.fused_reduce_encode(...)         # the reduce step of a quantized all-reduce in one kernel (CPU)

Error feedback: with `residual`, v = x + residual is encoded and residual <- v - decode(encode(v)),
so what one step loses is sent in the next (1-bit SGD); error_bound applies to v.
Blocks never straddle a slice boundary that is a multiple of `block`, so a tensor can be encoded
once and its chunks sent to different ranks (the reduce-scatter pattern of a quantized all-reduce).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from pycomm import _dtypes, kernels
from pycomm._tensors import check_tensor
from pycomm._validate import check_bool, check_int
from pycomm.kernels._buffer_checks import check_block, check_numel, check_seed, num_blocks

# fp32 rounding in the encode and decode arithmetic adds at most about 127 * 2^-23 * scale to the
# exact-arithmetic bound; error_bound includes this slack so `err <= bound` holds as stated.
_ROUNDING_SLACK = 2.0**-15
# A scale below float32's smallest normal (2^-126) is rounded to a multiple of 2^-149, an absolute error
# that the top level multiplies (and a scale that rounds to 0 leaves every element at 0): absmax codecs
# add (max_level + 1) * 2^-150 to the bound of such a block.
_SMALLEST_NORMAL, _SUBNORMAL_STEP = 2.0**-126, 2.0**-150


@dataclass
class Encoded:
    """One encoded tensor: `data` (flat int8 levels or uint8 sign bits), `scales` (flat fp32, one
    per block) and the element count it decodes to. Both payload tensors go on the wire."""

    data: torch.Tensor
    scales: torch.Tensor
    numel: int

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size() + self.scales.numel() * 4

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The payload to communicate, in a fixed order: (data, scales)."""
        return self.data, self.scales


def _check_encoded(enc: object, what: str) -> Encoded:
    if not isinstance(enc, Encoded):
        raise TypeError(
            f"{what}: enc must be an Encoded (from codec.encode() or codec.empty()), got {type(enc).__name__}"
        )
    return enc


class Codec(ABC):
    """Blockwise codec with one fp32 scale per block of `block` elements (the last may be short)."""

    #: dtype of Encoded.data and how many tensor elements one data element holds
    data_dtype: torch.dtype
    elements_per_data: int
    #: encode(x, residual) keeps an error-feedback residual
    supports_error_feedback: bool = True

    def __init__(self, block: int) -> None:
        self.block = check_block(block, type(self).__name__, multiple=self.elements_per_data)

    def data_numel(self, numel: int) -> int:
        """Elements of Encoded.data for a `numel`-element tensor."""
        return -(-check_numel(numel, f"{type(self).__name__}.data_numel") // self.elements_per_data)

    def wire_bytes(self, numel: int) -> int:
        """Bytes of the payload of a `numel`-element tensor (data + scales)."""
        check_numel(numel, f"{type(self).__name__}.wire_bytes")
        return self.data_numel(numel) * torch.empty((), dtype=self.data_dtype).element_size() + 4 * num_blocks(
            numel, self.block
        )

    def empty(self, numel: int, device: torch.device | str = "cpu") -> Encoded:
        """Uninitialized payload buffers for a `numel`-element tensor (e.g. to receive into)."""
        what = f"{type(self).__name__}.empty"
        check_numel(numel, what)
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(
                f"{what}: device must be a torch.device or a device string such as 'cpu' or "
                f"'cuda:0', got {device!r} ({e})"
            ) from None
        return Encoded(
            torch.empty(self.data_numel(numel), dtype=self.data_dtype, device=device),
            torch.empty(num_blocks(numel, self.block), dtype=torch.float32, device=device),
            numel,
        )

    def slice(self, enc: Encoded, start: int, stop: int) -> Encoded:
        """Views of the payload of elements [start, stop); start must be a multiple of `block` and
        stop one too or enc.numel."""
        what = f"{type(self).__name__}.slice"
        _check_encoded(enc, what)
        start = check_int(start, f"{what}: start", min_value=0, max_value=enc.numel)
        stop = check_int(stop, f"{what}: stop", min_value=start, max_value=enc.numel)
        if start % self.block or (stop % self.block and stop != enc.numel):
            raise ValueError(
                f"{what}: start and stop of [{start}, {stop}) must be multiples of block={self.block} "
                f"(stop may also be enc.numel={enc.numel})"
            )
        e = self.elements_per_data
        return Encoded(
            enc.data[start // e : -(-stop // e)],
            enc.scales[start // self.block : num_blocks(stop, self.block)],
            stop - start,
        )

    def _check_out(self, enc: Encoded, out: torch.Tensor, what: str, out_name: str) -> None:
        _check_encoded(enc, what)
        check_tensor(out, f"{what}: {out_name}")
        if out.numel() != enc.numel:
            raise ValueError(f"{what}: {out_name} must have enc.numel = {enc.numel} elements, got {out.numel()}")

    def _out(self, x: torch.Tensor, out: Encoded | None, what: str) -> Encoded:
        check_tensor(x, f"{what}: x", _dtypes.FLOATING)
        if out is None:
            return self.empty(x.numel(), x.device)
        if not isinstance(out, Encoded):
            raise TypeError(f"{what}: out must be an Encoded (from codec.empty()) or None, got {type(out).__name__}")
        if out.numel != x.numel():
            raise ValueError(f"{what}: out encodes {out.numel} elements, x has {x.numel()}")
        return out

    def _block_amax(self, x: torch.Tensor) -> torch.Tensor:
        """max |x| of each block, repeated to one value per element (fp32, flat). Only the whole blocks
        are viewed as a matrix and the short last one reduced apart, so nothing block-sized is allocated
        (a block far larger than x costs no memory)."""
        what = f"{type(self).__name__}.error_bound: x"
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{what}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _dtypes.FLOATING:
            raise TypeError(f"{what}: dtype {x.dtype} is not supported here; expected a floating dtype")
        v = x.detach().reshape(-1).float().abs()
        whole = v.numel() - v.numel() % self.block
        amax = v[:whole].view(-1, self.block).amax(dim=1).repeat_interleave(self.block)
        if whole < v.numel():
            amax = torch.cat([amax, v[whole:].amax().expand(v.numel() - whole)])
        return amax

    @abstractmethod
    def encode(self, x: torch.Tensor, residual: torch.Tensor | None = None, out: Encoded | None = None) -> Encoded:
        """Encode `x` (contiguous fp32/bf16/fp16/fp64); write into `out` when given."""

    def decode(self, enc: Encoded, out: torch.Tensor) -> torch.Tensor:
        """out = decoded values (cast to out.dtype). Returns `out`."""
        self._check_out(enc, out, f"{type(self).__name__}.decode", "out")
        return self._kernels()[0](enc.data, enc.scales, out, block=self.block)

    def decode_accumulate(self, enc: Encoded, acc: torch.Tensor) -> torch.Tensor:
        """acc += decoded values. Returns `acc`."""
        self._check_out(enc, acc, f"{type(self).__name__}.decode_accumulate", "acc")
        return self._kernels()[1](enc.data, enc.scales, acc, block=self.block)

    @abstractmethod
    def _kernels(self) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]:
        """The (decode, decode-accumulate) kernels of pycomm.kernels for this payload."""

    @abstractmethod
    def error_bound(self, x: torch.Tensor) -> torch.Tensor:
        """Flat fp32 tensor: a bound on |x - decode(encode(x))| for each element of x (fp32 decode)."""

    def fused_reduce_encode(
        self,
        own: torch.Tensor,
        sources: Sequence[tuple[torch.Tensor, torch.Tensor]],
        out: Encoded,
        *,
        factor: float,
        own_residual: torch.Tensor | None,
        residual: torch.Tensor | None,
        decoded_out: torch.Tensor | None,
    ) -> bool:
        """The reduce step of a quantized all-reduce in one kernel pass (fp32 CPU tensors; sources are
        (data, scales) pairs): out = encode((own (+ own_residual, then zeroed) + the sum of the sources'
        decodes) * factor, residual), and decoded_out = the decode of its first own.numel() elements.
        False when this codec has no fused kernel (then nothing was done)."""
        return False


class _AbsmaxCodec(Codec):
    """Symmetric absmax levels: scale = max|x| / max_level per block, level = round(x / scale) in
    [-max_level, max_level] (or stochastic rounding: floor(x / scale + u), unbiased).

    Stochastic rounding draws u from a counter-based hash of (seed, element index); each encode call
    advances the seed, so successive calls are independent while runs are reproducible. Use a
    different seed per rank to decorrelate ranks' rounding."""

    max_level: int
    _quantize: Callable[..., tuple[torch.Tensor, torch.Tensor]]  # the kernels (pycomm.kernels)
    _reduce: Callable[..., tuple[torch.Tensor, torch.Tensor]]

    def __init__(self, block: int, stochastic: bool, seed: int) -> None:
        super().__init__(block)
        self.stochastic = check_bool(stochastic, f"{type(self).__name__}: stochastic")
        self.seed = check_seed(seed, type(self).__name__)
        self._calls = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(block={self.block}, stochastic={self.stochastic}, seed={self.seed})"

    def _next_seed(self) -> int:
        seed = (self.seed + self._calls * 0x9E3779B97F4A7C15) % (1 << 64)
        self._calls += 1
        return seed

    def encode(self, x: torch.Tensor, residual: torch.Tensor | None = None, out: Encoded | None = None) -> Encoded:
        out = self._out(x, out, f"{type(self).__name__}.encode")
        seed = self._next_seed() if self.stochastic else 0
        self._quantize(
            x, out.data, out.scales, block=self.block, stochastic=self.stochastic, seed=seed, residual=residual
        )
        return out

    def fused_reduce_encode(self, own, sources, out, *, factor, own_residual, residual, decoded_out) -> bool:
        seed = self._next_seed() if self.stochastic else 0  # the seed encode() would take
        self._reduce(
            own,
            list(sources),
            out.data,
            out.scales,
            numel=out.numel,
            block=self.block,
            factor=factor,
            own_residual=own_residual,
            residual=residual,
            stochastic=self.stochastic,
            seed=seed,
            decoded_out=decoded_out,
        )
        return True

    def error_bound(self, x: torch.Tensor) -> torch.Tensor:
        """scale / 2 per element (scale for stochastic rounding), plus fp32 rounding slack (and, in a block
        whose scale is subnormal, the rounding of the scale itself); 0 in an all-zero block."""
        amax = self._block_amax(x)
        scale = amax / float(self.max_level)
        subnormal = (scale < _SMALLEST_NORMAL) & (amax > 0)
        return scale * ((1.0 if self.stochastic else 0.5) + _ROUNDING_SLACK) + subnormal * (
            (self.max_level + 1) * _SUBNORMAL_STEP
        )


class Int8Codec(_AbsmaxCodec):
    """int8 blockwise: scale = max|x| / 127 per block, q = round(x / scale) (or stochastic rounding,
    see _AbsmaxCodec). Wire: 1 byte per element + 4 bytes per block."""

    data_dtype = torch.int8
    elements_per_data = 1
    max_level = 127

    def __init__(self, block: int = 256, stochastic: bool = False, seed: int = 0) -> None:
        super().__init__(block, stochastic, seed)

    _quantize = staticmethod(kernels.quantize_int8)

    @staticmethod
    def _reduce(*args, numel: int, **kwargs):
        return kernels.reduce_quantize_int8(*args, **kwargs)  # numel is q's length here

    def _kernels(self):
        return kernels.dequantize_int8, kernels.dequantize_int8_accumulate


class Int4Codec(_AbsmaxCodec):
    """int4 blockwise: scale = max|x| / 7 per block (block even), levels round(x / scale) in [-7, 7] (or
    stochastic rounding, see _AbsmaxCodec), two per byte. Wire: half a byte per element + 4 bytes per
    block, 7.5x smaller than fp32 at the default block of 128 (int8: 3.9x at 256).

    Error bound per element (error_bound; tests/kernels/test_int4.py checks it on random and adversarial
    inputs): deterministic rounding scale / 2 = max|x of the block| / 14, stochastic rounding scale, plus
    fp32 rounding slack (and in a block whose scale is subnormal, below 2^-126, 8 * 2^-150 more); a block
    with a NaN or an infinity decodes to NaN. About 18 times int8's (127 / 7), which is why it is meant for
    error-feedback use (a quantized all-reduce's ErrorFeedback, DiLoCo's pseudo-gradients), where what
    one round loses is sent in the next. The default block is half int8's: a block's error scales with
    its largest element, and the 4 bytes of a scale cost less here than the coarser levels do."""

    data_dtype = torch.uint8
    elements_per_data = 2
    max_level = 7

    def __init__(self, block: int = 128, stochastic: bool = False, seed: int = 0) -> None:
        super().__init__(block, stochastic, seed)

    _quantize = staticmethod(kernels.quantize_int4)
    _reduce = staticmethod(kernels.reduce_quantize_int4)

    def _kernels(self):
        return kernels.dequantize_int4, kernels.dequantize_int4_accumulate


class OneBitCodec(Codec):
    """1-bit sign with one scale per block (mean |x|); meant for error feedback, which carries the
    large per-step error forward. Wire: 1 bit per element + 4 bytes per block. block % 8 == 0."""

    data_dtype = torch.uint8
    elements_per_data = 8

    def __init__(self, block: int = 256) -> None:
        super().__init__(block)

    def __repr__(self) -> str:
        return f"OneBitCodec(block={self.block})"

    def encode(self, x: torch.Tensor, residual: torch.Tensor | None = None, out: Encoded | None = None) -> Encoded:
        out = self._out(x, out, "OneBitCodec.encode")
        kernels.sign_compress(x, out.data, out.scales, block=self.block, residual=residual)
        return out

    def _kernels(self):
        return kernels.sign_decompress, kernels.sign_decompress_accumulate

    def error_bound(self, x: torch.Tensor) -> torch.Tensor:
        """| |x| - mean|x| | <= max|x| of the block, plus the fp32 rounding of the block's sum."""
        return self._block_amax(x) * (1.0 + self.block * 2.0**-23 + _ROUNDING_SLACK)

    def fused_reduce_encode(self, own, sources, out, *, factor, own_residual, residual, decoded_out) -> bool:
        kernels.reduce_sign_compress(
            own,
            list(sources),
            out.data,
            out.scales,
            numel=out.numel,
            block=self.block,
            factor=factor,
            own_residual=own_residual,
            residual=residual,
            decoded_out=decoded_out,
        )
        return True


# The codec names every op and option accepts (codec="int8"), resolved here only: each name builds the
# class's default instance.
CODEC_NAMES: dict[str, type[Codec]] = {
    "int8": Int8Codec,
    "int4": Int4Codec,
    "4bit": Int4Codec,
    "onebit": OneBitCodec,
    "1bit": OneBitCodec,
}


def resolve_codec(codec: object, what: str) -> Codec:
    """A codec instance, or the default instance a name in CODEC_NAMES stands for (any case). A bad name is a
    ValueError naming the choices; any other type a TypeError. `what` names the argument ("op: codec")."""
    if isinstance(codec, Codec):
        return codec
    if isinstance(codec, str):
        cls = CODEC_NAMES.get(codec.lower())
        if cls is None:
            raise ValueError(
                f"{what} {codec!r} is not a codec name; expected one of "
                f"{', '.join(map(repr, CODEC_NAMES))} or a codec instance (pycomm.Int8Codec, "
                f"pycomm.Int4Codec, pycomm.OneBitCodec)"
            )
        return cls()
    raise TypeError(
        f"{what}: expected a codec name ({', '.join(map(repr, CODEC_NAMES))}) or a pycomm codec "
        f"(pycomm.Int8Codec, pycomm.Int4Codec, pycomm.OneBitCodec), got {type(codec).__name__}"
    )
