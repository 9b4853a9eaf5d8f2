"""algorithms.Pipeline: pipeline model parallelism (GPipe and 1F1B) composed with data parallelism.

    pipe = algorithms.Pipeline(model, comm=None, schedule="1f1b", microbatches=8, split=None, data_parallel=1)
    # schedule: "gpipe" | "1f1b" | "interleaved_1f1b" (chunks=v model chunks per stage)
    loss = pipe.train_step(x, y, loss_fn)   # x read on the first stage, y on the last; loss on every rank
    opt = torch.optim.AdamW(pipe.stage_module.parameters()); opt.step(); opt.zero_grad()

Every rank builds the whole model (same seed) and keeps its stage's layers as `pipe.stage_module`. The
batch is cut into `microbatches` equal micro-batches; the last stage backpropagates loss_fn / m of each,
so after train_step the stage's gradients are the unsplit model's on the whole batch (loss_fn a mean).
With data_parallel=d the ranks form d replicas of the pipeline (algorithms/pipeline/layout.py); each
replica's first and last stages read their own batch, and the stage's gradients are averaged over its
replicas by pycomm.GradientBuckets while the last backward runs. To average with a data-parallel
algorithm instead, pass average_gradients=False and wrap the stage optimizer on `pipe.replica_comm`
(with mbsgd, hand its no_sync to train_step so its hooks fire once per step)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, ContextManager, Optional

import torch
from torch import nn

import pycomm
from algorithms import traits
from algorithms.pipeline import timeline, verdicts
from algorithms.pipeline.action_lists import SCHEDULES, action_list
from algorithms.pipeline.executor import StageLinks, StepRecord, run_stage
from algorithms.pipeline.layout import Layout
from algorithms.pipeline.links import FIRST_CHUNK_TAG, LOSS_TAG, Link
from algorithms.pipeline.partition import layers_of, stage_bounds, stage_module

HEAD = 3   # a stats() row: peak live, compute seconds, step seconds, then the executed order


class Pipeline:
    training = traits.PIPELINE
    state_layout = traits.SHARDED      # each rank holds its stage's layers: every rank saves its own

    def __init__(self, model: Any, comm: Any = None, schedule: str = "1f1b", microbatches: int = 8,
                 split: Optional[list[int]] = None, data_parallel: int = 1, *, chunks: int = 2,
                 average_gradients: bool = True) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"Pipeline: schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise ValueError(f"Pipeline: microbatches must be a positive int, got {microbatches!r}")
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 2:
            raise ValueError(f"Pipeline: chunks (model chunks per stage, interleaved_1f1b) must be an int >= 2, "
                             f"got {chunks!r}")
        layers = layers_of(model)
        self.comm = pycomm.world() if comm is None else comm
        self.layout = Layout.build(self.comm, data_parallel)
        lay = self.layout
        self.chunks = chunks if schedule == "interleaved_1f1b" else 1
        if self.chunks > 1 and (lay.stages < 2 or microbatches % lay.stages):
            raise ValueError(f"Pipeline: interleaved_1f1b needs at least 2 stages and microbatches a multiple of "
                             f"the {lay.stages} stages, got microbatches={microbatches}; use gpipe or 1f1b otherwise")
        self.schedule, self.microbatches = schedule, microbatches
        # global chunk g = c * stages + stage: this stage's chunks are every stages-th run of layers
        self.bounds = stage_bounds(layers, lay.stages * self.chunks, split)
        self.chunk_modules = [stage_module(layers, self.bounds, c * lay.stages + lay.stage) for c in range(self.chunks)]
        self.stage_module: nn.Module = self.chunk_modules[0] if self.chunks == 1 else nn.ModuleDict(OrderedDict(
            (name, layer) for chunk in self.chunk_modules for name, layer in chunk.named_children()))
        self._actions = action_list(schedule, lay.stage, lay.stages, microbatches, self.chunks)
        self._links = [self._make_links(c) for c in range(self.chunks)]
        s = lay.stage
        self._loss_in = Link(lay.bwd_comm, s + 1, LOSS_TAG) if s < lay.stages - 1 else None
        self._loss_out = Link(lay.bwd_comm, s - 1, LOSS_TAG) if s > 0 else None
        self._buckets: Optional[pycomm.GradientBuckets] = None
        if lay.replicas > 1:
            # the replicas of a stage start identical (as DDP does): replica 0's parameters and buffers
            state = list(self.stage_module.parameters()) + list(self.stage_module.buffers())
            if state:
                lay.replica_comm.broadcast_coalesced([t.data for t in state], root=0).wait()
            if average_gradients:
                self._buckets = pycomm.GradientBuckets(list(self.stage_module.parameters()), comm=lay.replica_comm)
        self._record: Optional[StepRecord] = None

    # -- where this rank is ------------------------------------------------------------------------
    @property
    def stage(self) -> int:
        return self.layout.stage

    @property
    def stages(self) -> int:
        return self.layout.stages

    @property
    def is_first(self) -> bool:
        return self.layout.stage == 0

    @property
    def is_last(self) -> bool:
        return self.layout.stage == self.layout.stages - 1

    @property
    def pipeline_comm(self) -> Any:
        return self.layout.pipeline_comm

    @property
    def replica_comm(self) -> Any:
        return self.layout.replica_comm

    def _make_links(self, chunk: int) -> StageLinks:
        """Chunk `chunk`'s links: global chunk g talks to g - 1 and g + 1 (on the neighbouring stages,
        the last stage's chunk c to the first stage's chunk c + 1), tagged by the receiving chunk."""
        lay = self.layout
        p, g, last = lay.stages, chunk * lay.stages + lay.stage, lay.stages * self.chunks - 1

        def tag(h: int) -> int:
            return FIRST_CHUNK_TAG + h // p
        prev, nxt = g > 0, g < last
        return StageLinks(fwd_in=Link(lay.fwd_comm, (g - 1) % p, tag(g)) if prev else None,
                          fwd_out=Link(lay.fwd_comm, (g + 1) % p, tag(g + 1)) if nxt else None,
                          bwd_in=Link(lay.bwd_comm, (g + 1) % p, tag(g)) if nxt else None,
                          bwd_out=Link(lay.bwd_comm, (g - 1) % p, tag(g - 1)) if prev else None)

    # -- a training step ---------------------------------------------------------------------------
    def _micro(self, t: Any, name: str) -> list[torch.Tensor]:
        where = "first" if name == "x" else "last"
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            raise TypeError(f"Pipeline.train_step: {name} must be a batch tensor on the {where} stage (stage "
                            f"{self.stage} of {self.stages}), got {type(t).__name__}")
        if t.shape[0] % self.microbatches:
            raise ValueError(f"Pipeline.train_step: {name} has a batch of {t.shape[0]} samples, which does not "
                             f"divide into microbatches={self.microbatches} equal micro-batches; use a batch "
                             f"size that is a multiple of {self.microbatches}")
        return list(t.split(t.shape[0] // self.microbatches))

    def _inputs(self, x: Any, y: Any, loss_fn: Any) -> tuple[Optional[list[torch.Tensor]],
                                                             Optional[list[torch.Tensor]]]:
        inputs = self._micro(x, "x") if self.is_first else None
        targets = None
        if self.is_last:
            if not callable(loss_fn):
                raise TypeError(f"Pipeline.train_step: loss_fn must be callable (output, y) -> scalar loss, "
                                f"got {type(loss_fn).__name__}")
            targets = self._micro(y, "y")
        return inputs, targets

    def train_step(self, x: Optional[torch.Tensor], y: Any, loss_fn: Callable[[Any, Any], torch.Tensor], *,
                   no_sync: Optional[Callable[[], ContextManager[Any]]] = None) -> float:
        """Forward and backward of the whole batch through the schedule; gradients accumulate into the
        stage's parameters (zero them between steps). Returns the batch's loss on every rank (the mean
        over replicas with data_parallel > 1). x is read on the first stage, y and loss_fn on the last
        (elsewhere they may be None). Collective over the communicator."""
        inputs, targets = verdicts.agree(self.layout, self.comm.rank, self.comm.size,
                                         lambda: self._inputs(x, y, loss_fn))
        contexts = [c for c in (self._buckets.no_sync if self._buckets else None, no_sync) if c is not None]
        if self._buckets is not None:
            self._buckets.reset()
        loss, rec = run_stage(self.chunk_modules, self._actions, self._links, self.microbatches, inputs, targets,
                              loss_fn, contexts)
        if self._buckets is not None:
            # backward launched the buckets whose gradients it finished; a bucket of a chunk whose last
            # backward ran inside no_sync (interleaved) is launched here
            self._buckets.synchronize()
        self._record = rec
        return self._share_loss(loss)

    def _share_loss(self, loss: float) -> float:
        """The last stage's loss to every stage, stage to stage on the backward channel (each forwards it
        after its last backward, so it mostly travels while the earlier stages finish theirs); the mean
        over replicas with data parallelism."""
        lay = self.layout
        total = torch.tensor([loss], dtype=torch.float64)
        if self._loss_in is not None:
            total = self._loss_in.post_recv().wait()
        if self._loss_out is not None:
            self._loss_out.send(total)
            self._loss_out.flush()
        if lay.replicas > 1:
            lay.replica_comm.allreduce(total, op=pycomm.AVG)
        return float(total[0])

    def stats(self) -> dict[str, Any]:
        """Of the last train_step; collective over the pipeline's stages (one all-gather), so call it on
        every rank. `bubble`: measured in time slots from the order the stages executed
        (algorithms/pipeline/timeline.py), next to `expected_bubble` (p - 1)/(m + p - 1); `peak_live`: per
        stage the most micro-batches whose activations it held (1F1B: p - stage, capped at m; GPipe: m);
        `wall_bubble`: per stage 1 - compute seconds / step seconds; `executed`: per stage its forwards and
        backwards in order."""
        if self._record is None:
            raise RuntimeError("Pipeline.stats: no train_step has run yet")
        lay, rec, n = self.layout, self._record, HEAD + 2 * self.microbatches * self.chunks
        mine = torch.tensor([rec.peak_live, rec.compute_s, rec.step_s, *timeline.encode(rec.executed)],
                            dtype=torch.float64)
        every = torch.empty(lay.stages * n, dtype=torch.float64)
        lay.pipeline_comm.allgather(every, mine)
        rows = every.view(lay.stages, n).tolist()
        orders = [timeline.decode(r[HEAD:]) for r in rows]
        return {
            "schedule": self.schedule, "stages": lay.stages, "microbatches": self.microbatches,
            "chunks": self.chunks, "replicas": lay.replicas, "stage": lay.stage, "replica": lay.replica,
            "bubble": timeline.slot_bubble(orders),
            "expected_bubble": timeline.expected_bubble(lay.stages, self.microbatches, self.chunks),
            "peak_live": [int(r[0]) for r in rows],
            "wall_bubble": [1.0 - r[1] / r[2] if r[2] > 0 else 0.0 for r in rows],
            "executed": [[repr(a) for a in o] for o in orders],
        }


traits.check(Pipeline)
