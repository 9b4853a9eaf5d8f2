"""algorithms.Pipeline: pipeline model parallelism (GPipe and 1F1B) composed with data parallelism.

    pipe = algorithms.Pipeline(model, comm=None, schedule="1f1b", microbatches=8, split=None, data_parallel=1)
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

from typing import Any, Callable, ContextManager, Optional

import torch

import pycomm
from algorithms import traits
from algorithms.pipeline import timeline, verdicts
from algorithms.pipeline.action_lists import SCHEDULES, action_list
from algorithms.pipeline.executor import StageLinks, StepRecord, run_stage
from algorithms.pipeline.layout import Layout
from algorithms.pipeline.links import Link
from algorithms.pipeline.partition import layers_of, stage_bounds, stage_module

HEAD = 3   # a stats() row: peak live, compute seconds, step seconds, then the executed order


class Pipeline:
    training = traits.PIPELINE
    state_layout = traits.SHARDED      # each rank holds its stage's layers: every rank saves its own

    def __init__(self, model: Any, comm: Any = None, schedule: str = "1f1b", microbatches: int = 8,
                 split: Optional[list[int]] = None, data_parallel: int = 1, *, average_gradients: bool = True) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"Pipeline: schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise ValueError(f"Pipeline: microbatches must be a positive int, got {microbatches!r}")
        layers = layers_of(model)
        self.comm = pycomm.world() if comm is None else comm
        self.layout = Layout.build(self.comm, data_parallel)
        lay = self.layout
        self.schedule, self.microbatches = schedule, microbatches
        self.bounds = stage_bounds(layers, lay.stages, split)
        self.stage_module = stage_module(layers, self.bounds, lay.stage)
        self._actions = action_list(schedule, lay.stage, lay.stages, microbatches)
        self._links = self._make_links()
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

    def _make_links(self) -> StageLinks:
        lay, s = self.layout, self.layout.stage
        if lay.stages == 1:
            return StageLinks()
        prev, nxt = (s > 0), (s < lay.stages - 1)
        return StageLinks(fwd_in=Link(lay.fwd_comm, s - 1) if prev else None,
                          fwd_out=Link(lay.fwd_comm, s + 1) if nxt else None,
                          bwd_in=Link(lay.bwd_comm, s + 1) if nxt else None,
                          bwd_out=Link(lay.bwd_comm, s - 1) if prev else None)

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

    def _inputs(self, x: Any, y: Any, loss_fn: Any) -> tuple[Optional[list[torch.Tensor]], Optional[list[torch.Tensor]]]:
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
        loss, rec = run_stage(self.stage_module, self._actions, self._links, self.microbatches, inputs, targets,
                              loss_fn, contexts)
        self._record = rec
        return self._share_loss(loss)

    def _share_loss(self, loss: float) -> float:
        """The last stage's loss to every stage, back along the gradients' links (each stage forwards it
        after its last backward, so it mostly travels while the earlier stages finish theirs); the mean
        over replicas with data parallelism."""
        lay, links = self.layout, self._links
        total = torch.tensor([loss], dtype=torch.float64)
        if links.bwd_in is not None:        # after every gradient receive: same link, same tag, in order
            total = links.bwd_in.post_recv().wait()
        if links.bwd_out is not None:
            links.bwd_out.send(total)
            links.bwd_out.flush()
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
        lay, rec, n = self.layout, self._record, HEAD + 2 * self.microbatches
        mine = torch.tensor([rec.peak_live, rec.compute_s, rec.step_s, *timeline.encode(rec.executed)],
                            dtype=torch.float64)
        every = torch.empty(lay.stages * n, dtype=torch.float64)
        lay.pipeline_comm.allgather(every, mine)
        rows = every.view(lay.stages, n).tolist()
        orders = [timeline.decode(r[HEAD:]) for r in rows]
        return {
            "schedule": self.schedule, "stages": lay.stages, "microbatches": self.microbatches,
            "replicas": lay.replicas, "stage": lay.stage, "replica": lay.replica,
            "bubble": timeline.slot_bubble(orders),
            "expected_bubble": timeline.expected_bubble(lay.stages, self.microbatches),
            "peak_live": [int(r[0]) for r in rows],
            "wall_bubble": [1.0 - r[1] / r[2] if r[2] > 0 else 0.0 for r in rows],
            "executed": [[repr(a) for a in o] for o in orders],
        }


traits.check(Pipeline)
