"""algorithms.Pipeline: pipeline model parallelism (GPipe and 1F1B) composed with data parallelism.

    pipe = algorithms.Pipeline(model, mesh=mesh, schedule="1f1b", microbatches=8)   # stages over mesh["pp"]
    # or Pipeline(model, comm, ..., data_parallel=d): the mesh pycomm.Mesh(comm, pp=-1, dp_shard=d)
    # schedule: "gpipe" | "1f1b" | "interleaved_1f1b" (chunks=v model chunks per stage)
    loss = pipe.train_step(x, y, loss_fn)   # x read on the first stage, y on the last; loss on every rank
    opt = torch.optim.AdamW(pipe.stage_module.parameters()); opt.step(); opt.zero_grad()

Every rank builds the whole model (same seed) and keeps its stage's layers as `pipe.stage_module`. The
batch is cut into `microbatches` equal micro-batches; the last stage backpropagates loss_fn / m of each,
so after train_step the stage's gradients are the unsplit model's on the whole batch (loss_fn a mean).
The stages are mesh["pp"]; each stage's replicas are mesh["dp"] (every replica's first and last stages
read their own batch). The replicas' gradients are averaged by pycomm.GradientBuckets while the last
backward runs, unless a CommOptimizer over the stage's parameters (a data-parallel method or ZeRO on the
same mesh) claims them (algorithms/composition.py): the pipeline then leaves their communication to it
and runs every backward but the last inside its no_sync, so its hooks fire once per step."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Any, Callable, ContextManager, Optional

import torch
from torch import nn

import pycomm
from algorithms import clipping, composition, traits
from algorithms.channel import bytes_across_nodes
from algorithms.pipeline import timeline, verdicts
from algorithms.pipeline.executor import StageLinks, StepRecord, run_stage
from algorithms.pipeline.links import FIRST_CHUNK_TAG, LOSS_TAG, Link
from algorithms.pipeline.partition import check_untied, layers_of, stage_bounds, stage_module
from algorithms.pipeline.pipeline_schedules import SCHEDULES, action_list

HEAD = 3  # a stats() row: peak live, compute seconds, step seconds, then the executed order


class Pipeline:
    training = traits.PIPELINE
    state_layout = traits.SHARDED  # each rank holds its stage's layers: every rank saves its own

    def __init__(
        self,
        model: Any,
        comm: Any = None,
        schedule: str = "1f1b",
        microbatches: int = 8,
        split: Optional[list[int]] = None,
        data_parallel: int = 1,
        *,
        mesh: Optional[pycomm.Mesh] = None,
        chunks: int = 2,
        average_gradients: bool = True,
    ) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"Pipeline: schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise ValueError(f"Pipeline: microbatches must be a positive int, got {microbatches!r}")
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 2:
            raise ValueError(
                f"Pipeline: chunks (model chunks per stage, interleaved_1f1b) must be an int >= 2, got {chunks!r}"
            )
        layers = layers_of(model)
        self.mesh = _mesh(comm, mesh, data_parallel)
        self.comm = self.mesh.comm
        self.pipeline_comm, self.replica_comm = self.mesh["pp"], self.mesh["dp"]
        self.stage, self.stages = self.mesh.coords["pp"], self.mesh.shape["pp"]
        self.replica, self.replicas = self.replica_comm.rank, self.replica_comm.size
        self.chunks = chunks if schedule == "interleaved_1f1b" else 1
        if self.chunks > 1 and (self.stages < 2 or microbatches % self.stages):
            raise ValueError(
                f"Pipeline: interleaved_1f1b needs at least 2 stages and microbatches a multiple of "
                f"the {self.stages} stages, got microbatches={microbatches}; use gpipe or 1f1b otherwise"
            )
        self.schedule, self.microbatches = schedule, microbatches
        # global chunk g = c * stages + stage: this stage's chunks are every stages-th run of layers
        self.bounds = stage_bounds(layers, self.stages * self.chunks, split)
        check_untied(layers, self.bounds)
        self.chunk_modules = [
            stage_module(layers, self.bounds, c * self.stages + self.stage) for c in range(self.chunks)
        ]
        self.stage_module: nn.Module = (
            self.chunk_modules[0]
            if self.chunks == 1
            else nn.ModuleDict(
                OrderedDict((name, layer) for chunk in self.chunk_modules for name, layer in chunk.named_children())
            )
        )
        # activations and their gradients travel on two duplicates of the stages' communicator
        self._fwd_comm = self.pipeline_comm.dup() if self.stages > 1 else None
        self._bwd_comm = self.pipeline_comm.dup() if self.stages > 1 else None
        self._actions = action_list(schedule, self.stage, self.stages, microbatches, self.chunks)
        self._links = [self._make_links(c) for c in range(self.chunks)]
        s = self.stage
        self._loss_in = Link(self._bwd_comm, s + 1, LOSS_TAG) if s < self.stages - 1 else None
        self._loss_out = Link(self._bwd_comm, s - 1, LOSS_TAG) if s > 0 else None
        self._average = average_gradients and self.replicas > 1
        self._buckets: Optional[pycomm.GradientBuckets] = None  # made at the first step nothing claims the stage
        self.dp_bytes = 0  # what this rank handed to the replicas' gradient and loss all-reduces
        self._bytes_before = {"pp": 0, "dp": 0}  # counted before a resume (load_state_dict)
        self.replica_loss = float("nan")  # this replica's loss of the last step (the same on all its stages)
        if self.replicas > 1:
            # the replicas of a stage start identical (as DDP does): replica 0's parameters and buffers
            state = list(self.stage_module.parameters()) + list(self.stage_module.buffers())
            if state:
                self.replica_comm.broadcast_coalesced([t.data for t in state], root=0, async_op=True).wait()
        self._record: Optional[StepRecord] = None

    # -- where this rank is ------------------------------------------------------------------------
    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.stages - 1

    def _make_links(self, chunk: int) -> StageLinks:
        """Chunk `chunk`'s links: global chunk g talks to g - 1 and g + 1 (on the neighbouring stages,
        the last stage's chunk c to the first stage's chunk c + 1), tagged by the receiving chunk."""
        p, g, last = self.stages, chunk * self.stages + self.stage, self.stages * self.chunks - 1

        def tag(h: int) -> int:
            return FIRST_CHUNK_TAG + h // p

        prev, nxt = g > 0, g < last
        return StageLinks(
            fwd_in=Link(self._fwd_comm, (g - 1) % p, tag(g)) if prev else None,
            fwd_out=Link(self._fwd_comm, (g + 1) % p, tag(g + 1)) if nxt else None,
            bwd_in=Link(self._bwd_comm, (g + 1) % p, tag(g)) if nxt else None,
            bwd_out=Link(self._bwd_comm, (g - 1) % p, tag(g - 1)) if prev else None,
        )

    # -- a training step ---------------------------------------------------------------------------
    def _micro(self, t: Any, name: str) -> list[torch.Tensor]:
        where = "first" if name == "x" else "last"
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            raise TypeError(
                f"Pipeline.train_step: {name} must be a batch tensor on the {where} stage (stage "
                f"{self.stage} of {self.stages}), got {type(t).__name__}"
            )
        if t.shape[0] % self.microbatches:
            raise ValueError(
                f"Pipeline.train_step: {name} has a batch of {t.shape[0]} samples, which does not "
                f"divide into microbatches={self.microbatches} equal micro-batches; use a batch "
                f"size that is a multiple of {self.microbatches}"
            )
        return list(t.split(t.shape[0] // self.microbatches))

    def _inputs(
        self, x: Any, y: Any, loss_fn: Any
    ) -> tuple[Optional[list[torch.Tensor]], Optional[list[torch.Tensor]]]:
        inputs = self._micro(x, "x") if self.is_first else None
        targets = None
        if self.is_last:
            if not callable(loss_fn):
                raise TypeError(
                    f"Pipeline.train_step: loss_fn must be callable (output, y) -> scalar loss, "
                    f"got {type(loss_fn).__name__}"
                )
            targets = self._micro(y, "y")
        return inputs, targets

    def train_step(
        self,
        x: Optional[torch.Tensor],
        y: Any,
        loss_fn: Callable[[Any, Any], torch.Tensor],
        *,
        no_sync: Optional[Callable[[], ContextManager[Any]]] = None,
    ) -> float:
        """Forward and backward of the whole batch through the schedule; gradients accumulate into the
        stage's parameters (zero them between steps). Returns the batch's loss on every rank (the mean
        over replicas; `replica_loss` is this replica's own). x is read on the first stage, y and
        loss_fn on the last (elsewhere they may be None). Collective over the mesh. `no_sync`: a context
        every backward but the last runs in (a claiming CommOptimizer's is used without being given)."""
        inputs, targets = verdicts.agree(self, self.comm.rank, self.comm.size, lambda: self._inputs(x, y, loss_fn))
        contexts = self._no_sync_contexts(no_sync)
        if self._buckets is not None:
            self._buckets.reset()
        # a sharded owner (zero3) keeps its units gathered across the micro-batches of this step
        gathered = getattr(composition.claimant(list(self.stage_module.parameters())), "gathered_through", None)
        with gathered() if gathered is not None else contextlib.nullcontext():
            loss, rec = run_stage(
                self.chunk_modules, self._actions, self._links, self.microbatches, inputs, targets, loss_fn, contexts
            )
        if self._buckets is not None:
            # backward launched the buckets whose gradients it finished; a bucket of a chunk whose last
            # backward ran inside no_sync (interleaved) is launched here
            self._buckets.synchronize()
        self._record = rec
        return self._share_loss(loss)

    def _no_sync_contexts(self, given: Optional[Callable[[], ContextManager[Any]]]) -> list[Callable[[], Any]]:
        """The contexts all but the last backward run in: the gradients' owner's (a claiming CommOptimizer,
        else the pipeline's own buckets when it averages the replicas), and the caller's."""
        params = list(self.stage_module.parameters())
        owner = composition.claimant(params)
        if owner is not None:
            if self._buckets is not None:  # claimed after an earlier step: the owner averages from now on
                self._buckets.remove_hooks()
                self._buckets = None
            own = getattr(owner, "no_sync", None)
        else:
            if self._buckets is None and self._average and params:
                self._buckets = pycomm.GradientBuckets(params, comm=self.replica_comm, launch=self._average_bucket)
            own = self._buckets.no_sync if self._buckets is not None else None
        contexts = [own] if own is not None else []
        if given is not None and given != own:
            contexts.append(given)
        return contexts

    def _average_bucket(self, bucket: Any) -> Any:
        assert self._buckets is not None
        self.dp_bytes += sum(g.numel() * g.element_size() for g in bucket.grads())
        return self._buckets.reduce(bucket)

    def _share_loss(self, loss: float) -> float:
        """The last stage's loss to every stage, stage to stage on the backward channel (each forwards it
        after its last backward, so it mostly travels while the earlier stages finish theirs); the mean
        over replicas with data parallelism."""
        total = torch.tensor([loss], dtype=torch.float64)
        if self._loss_in is not None:
            total = self._loss_in.post_recv().wait()
        if self._loss_out is not None:
            self._loss_out.send(total)
            self._loss_out.flush()
        self.replica_loss = float(total[0])
        if self.replicas > 1:
            self.dp_bytes += total.numel() * total.element_size()
            self.replica_comm.allreduce(total, op=pycomm.AVG)
        return float(total[0])

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach: bool | None = None
    ) -> torch.Tensor:
        """torch's clip_grad_norm_ on the whole model's (this replica's) gradient: the stage's gradients
        clipped by the norm over all stages (collective over mesh["pp"]); returns that norm. For a stage
        whose gradients a CommOptimizer owns (mbsgd, ZeRO, ...), call that optimizer's clip_grad_norm_."""
        grads = [p.grad for p in self.stage_module.parameters() if p.grad is not None]
        return clipping.clip_grad_norm_(
            grads, max_norm, norm_type, error_if_nonfinite, foreach, [self.pipeline_comm] if self.stages > 1 else []
        )

    def comm_stats(self) -> dict[str, Any]:
        """Bytes this rank handed to communication since the pipeline was made: `bytes_by_dim["pp"]` the
        activations, their gradients and the loss it sent to neighbouring stages; `["dp"]` the replicas'
        gradient and loss all-reduces (those the pipeline makes itself); `bytes_across_nodes` those on
        dimensions whose group spans nodes (algorithms.channel.bytes_across_nodes)."""
        sent = [link for links in self._links for link in (links.fwd_out, links.bwd_out) if link is not None]
        pp = self._bytes_before["pp"] + sum(
            link.sent_bytes for link in sent + ([self._loss_out] if self._loss_out is not None else [])
        )
        dp = self._bytes_before["dp"] + self.dp_bytes
        by_dim = {"pp": pp, "dp": dp}
        return {"bytes": pp + dp, "bytes_by_dim": by_dim, "bytes_across_nodes": bytes_across_nodes(self.mesh, by_dim)}

    def state_dict(self) -> dict[str, Any]:
        """The pipeline's own state: its byte counters (a resumed run counts on from them)."""
        return {"bytes_by_dim": self.comm_stats()["bytes_by_dim"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dp_bytes = 0
        for link in [link for links in self._links for link in (links.fwd_out, links.bwd_out) if link is not None] + (
            [self._loss_out] if self._loss_out is not None else []
        ):
            link.sent_bytes = 0
        self._bytes_before = dict(state["bytes_by_dim"])

    def stats(self) -> dict[str, Any]:
        """Of the last train_step; collective over the pipeline's stages (one all-gather), so call it on
        every rank. `bubble`: measured in time slots from the order the stages executed
        (algorithms/pipeline/timeline.py), next to `expected_bubble` (p - 1)/(m + p - 1); `peak_live`: per
        stage the most micro-batches whose activations it held (1F1B: p - stage, capped at m; GPipe: m);
        `wall_bubble`: per stage 1 - compute seconds / step seconds; `executed`: per stage its forwards and
        backwards in order."""
        if self._record is None:
            raise RuntimeError("Pipeline.stats: no train_step has run yet")
        rec, n = self._record, HEAD + 2 * self.microbatches * self.chunks
        mine = torch.tensor(
            [rec.peak_live, rec.compute_s, rec.step_s, *timeline.encode(rec.executed)], dtype=torch.float64
        )
        every = torch.empty(self.stages * n, dtype=torch.float64)
        self.pipeline_comm.allgather(every, mine)
        rows = every.view(self.stages, n).tolist()
        orders = [timeline.decode(r[HEAD:]) for r in rows]
        return {
            "schedule": self.schedule,
            "stages": self.stages,
            "microbatches": self.microbatches,
            "chunks": self.chunks,
            "replicas": self.replicas,
            "stage": self.stage,
            "replica": self.replica,
            "bubble": timeline.slot_bubble(orders),
            "expected_bubble": timeline.expected_bubble(self.stages, self.microbatches, self.chunks),
            "peak_live": [int(r[0]) for r in rows],
            "wall_bubble": [1.0 - r[1] / r[2] if r[2] > 0 else 0.0 for r in rows],
            "executed": [[repr(a) for a in o] for o in orders],
        }


traits.check(Pipeline)


def _mesh(comm: Any, mesh: Any, data_parallel: Any) -> pycomm.Mesh:
    """The pipeline's mesh: `mesh`, or `comm` (None: pycomm.world()) as data_parallel replicas of
    comm.size / data_parallel stages (pycomm.Mesh(comm, pp=-1, dp_shard=data_parallel))."""
    if isinstance(data_parallel, bool) or not isinstance(data_parallel, int) or data_parallel < 1:
        raise ValueError(
            f"Pipeline: data_parallel must be a positive int (replicas of the pipeline), got {data_parallel!r}"
        )
    if mesh is not None:
        if comm is not None or data_parallel != 1:
            raise TypeError(
                "Pipeline: give mesh= alone (its pp are the stages, its dp the replicas), not also "
                "comm= or data_parallel="
            )
        if not isinstance(mesh, pycomm.Mesh):
            raise TypeError(f"Pipeline: mesh must be a pycomm.Mesh, got {type(mesh).__name__}")
        return mesh
    comm = pycomm.world() if comm is None else comm
    if comm.size % data_parallel:
        raise ValueError(
            f"Pipeline: data_parallel={data_parallel} must divide the communicator's "
            f"{comm.size} ranks (stages = ranks / data_parallel)"
        )
    return pycomm.Mesh(comm, pp=-1, dp_replicate=1, dp_shard=data_parallel)
