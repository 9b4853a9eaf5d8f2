"""Layer-wise asynchronous averaging (`pycomm.LayerwiseAverager`), the averaging step of LAP-SGD.

start() snapshots every layer into a flat bucket and launches its all-reduce AVG without blocking;
training goes on changing the parameters meanwhile. When a layer's average is in, the apply
`x += avg - snapshot` (one fused kernel over the layer's tensors, reading the buckets) moves x to the
average while keeping every local update made since the snapshot.

Through a codec, the first round travels exact and every later one carries a layer's difference from
the previous round's average, which every rank holds with the same bytes: a blockwise codec's error
scales with what it encodes, and the drift of one round is far smaller than the weights themselves,
so the error no longer grows with the weights' magnitude round after round."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence, Union

import torch

from pycomm import _dtypes, kernels, relative, runtime
from pycomm._codec_wire import check_codec
from pycomm._tensors import check_tensor, place_of
from pycomm.communicator import Communicator
from pycomm.ops import AVG

Layer = Union[torch.Tensor, Sequence[torch.Tensor]]


class _LayerBuckets:
    """One layer's tensors of one dtype, its snapshot and the bucket being averaged."""

    def __init__(self, tensors: list[torch.Tensor], delta: bool) -> None:
        self.tensors = tensors
        numel = sum(t.numel() for t in tensors)
        self.snapshot = torch.empty(numel, dtype=tensors[0].dtype, device=tensors[0].device)
        self.average = torch.empty_like(self.snapshot)
        # previous round's average, identical on every rank (compressed rounds send snapshot - reference)
        self.reference = torch.zeros_like(self.snapshot) if delta else None

    def snap(self) -> None:
        """Snapshot the layer; `average` becomes what travels (the snapshot, or its delta)."""
        kernels.pack(self.tensors, self.snapshot)
        if self.reference is None:
            self.average.copy_(self.snapshot)
        else:
            relative.to_relative([self.snapshot], [self.reference], out=[self.average])

    def apply(self) -> None:
        if self.reference is not None:  # average of the deltas -> average of the snapshots
            relative.from_relative([self.average], [self.reference])
            self.reference.copy_(self.average)
        kernels.averaging_apply(self.tensors, self.average, self.snapshot)


class LayerwiseAverager:
    """Averages parameters layer by layer across `comm` without stopping training.

    params_by_layer: a sequence (or a mapping name -> layer) of layers, each a tensor or a sequence of
    floating tensors. comm: a pycomm.Communicator (None: pycomm.world()). codec: optional pycomm codec;
    the averages then travel quantized through allreduce_quantized, as differences from the previous
    round's average (see the module's docstring). Layers are keyed by their index (or name for a
    mapping). Every rank must call start() at the same point of its sequence of ops on `comm`; an
    averager driven from its own thread (LAP-SGD's averaging activity) should get a communicator of its
    own (comm.split(0)) so its all-reduces never interleave with the trainer's."""

    def __init__(
        self, params_by_layer: Sequence[Layer] | Mapping[Any, Layer], comm: Any = None, codec: Any = None
    ) -> None:
        what = "LayerwiseAverager"
        if isinstance(params_by_layer, Mapping):
            keys, layers = list(params_by_layer.keys()), list(params_by_layer.values())
        elif isinstance(params_by_layer, Sequence) and not isinstance(params_by_layer, (torch.Tensor, str, bytes)):
            keys, layers = list(range(len(params_by_layer))), list(params_by_layer)
        else:
            raise TypeError(
                f"{what}: params_by_layer must be a sequence or mapping of layers (each a tensor or a "
                f"list of tensors), got {type(params_by_layer).__name__}"
            )
        if not layers:
            raise ValueError(f"{what}: params_by_layer is empty")
        if comm is not None and not isinstance(comm, Communicator):
            raise TypeError(
                f"{what}: comm must be a pycomm.Communicator or None (pycomm.world()), got {type(comm).__name__}"
            )
        if codec is not None:
            check_codec(codec, f"{what}: codec")
        self.comm = runtime.world() if comm is None else comm
        self.codec, self.keys = codec, keys
        self._layers: dict[Any, list[_LayerBuckets]] = {}
        for key, layer in zip(keys, layers):
            where = f"{what}: params_by_layer: layer {key!r}"
            tensors = [layer] if isinstance(layer, torch.Tensor) else list(_iter_layer(layer, where))
            tensors = [
                check_tensor(t.data if isinstance(t, torch.Tensor) else t, f"{where} tensor {i}", _dtypes.FLOATING)
                for i, t in enumerate(tensors)
            ]
            place_of(tensors, where)
            by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
            for t in tensors:
                if t.numel():
                    by_dtype.setdefault(t.dtype, []).append(t)
            self._layers[key] = [_LayerBuckets(ts, delta=codec is not None) for ts in by_dtype.values()]
        self._pending: dict[Any, list[Any]] = {}  # layer key -> works, in launch order
        self._exact_round = True  # no common reference yet: the first round is never compressed

    def next_round_bytes(self) -> int:
        """Bytes this rank hands to collectives in the next start() (compressed size through a codec)."""
        buckets = [b for layer in self._layers.values() for b in layer]
        if self.codec is None or self._exact_round:
            return sum(b.average.numel() * b.average.element_size() for b in buckets)
        return sum(self.codec.wire_bytes(b.average.numel()) for b in buckets)

    @property
    def pending(self) -> list[Any]:
        """Keys of the layers whose average has not been applied yet."""
        return list(self._pending)

    def start(self) -> None:
        """Snapshot every layer and launch its all-reduce AVG; returns at once."""
        if self._pending:
            raise RuntimeError(
                f"LayerwiseAverager.start: {len(self._pending)} layer(s) of the previous round are "
                f"still pending; call wait() (or poll() until it returns them all) first"
            )
        exact, self._exact_round = self.codec is None or self._exact_round, False
        for key in self.keys:
            works = []
            for bucket in self._layers[key]:
                bucket.snap()
                if exact:
                    works.append(self.comm.allreduce(bucket.average, op=AVG, async_op=True))
                else:
                    works.append(self.comm.allreduce_quantized(bucket.average, op=AVG, codec=self.codec, async_op=True))
            self._pending[key] = works

    def poll(self) -> int:
        """Apply the average of every layer whose all-reduce has finished; returns how many layers."""
        done = [key for key, works in self._pending.items() if all(w.is_completed() for w in works)]
        for key in done:
            self._finish(key)
        return len(done)

    def wait(self, layer: Any = None) -> None:
        """Block until `layer` (or every pending layer when None) is averaged and applied."""
        if layer is None:
            for key in list(self._pending):
                self._finish(key)
            return
        if layer not in self._layers:
            raise KeyError(f"LayerwiseAverager.wait: no layer {layer!r}; layers are {self.keys}")
        if layer in self._pending:
            self._finish(layer)

    def _finish(self, key: Any) -> None:
        works = self._pending[key]
        for work in works:
            work.wait()
        for bucket in self._layers[key]:
            bucket.apply()
        del self._pending[key]


def _iter_layer(layer: Any, where: str) -> Iterable[torch.Tensor]:
    if not isinstance(layer, (Sequence, Iterable)) or isinstance(layer, (str, bytes)):
        raise TypeError(f"{where} must be a tensor or a sequence of tensors, got {type(layer).__name__}")
    return layer
