"""LAP/LPP worker machinery on one rank: P real worker processes share one model lock-free; counters,
per-worker momentum and LPP's partitioned steps. (Averaging across ranks: test_lapsgd.py.)"""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import TensorDataset

from algorithms.lap.pool import WorkerPool
from algorithms.lap.shared import MomentumState, SharedCounters
from algorithms.lap.worker import GroupHyper, HogwildWorker, WorkerSpec
from tests.algorithms.lap_models import (
    Scale,
    SmallCNN,
    WideSum,
    failing_loss,
    linear_loss,
    mean_loss,
    paced_linear_loss,
)

LR = 1.0 / 64  # updates of 1/64 are exact in fp32: a lost or extra update shows as a whole multiple


def ones_dataset(n: int = 64, width: int = 8) -> TensorDataset:
    return TensorDataset(torch.ones(n, width), torch.ones(n, width))


def make_pool(
    model: torch.nn.Module,
    workers: int,
    steps: int,
    momentum: float = 0.0,
    loss=linear_loss,
    start_method: str = "fork",
    blocks=None,
    device: str = "cpu",
) -> tuple[WorkerPool, MomentumState]:
    params = list(model.parameters())
    state = MomentumState.zeros(params, workers)
    pool = WorkerPool(
        model=model,
        loss_fn=loss,
        dataset=ones_dataset(),
        shard=torch.arange(64),
        batch_size=8,
        groups=[GroupHyper(momentum, 0.0, 0.0, False)],
        group_of=[0] * len(params),
        momentum=state,
        blocks=blocks,
        prepassm_steps=0,
        seeds=list(range(workers)),
        device=torch.device(device),
        start_method=start_method,
        threads=1,
        first_step=0,
        steps=steps,
    )
    pool.set_lrs([LR])
    return pool, state


def wait_until(condition, what: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} after {timeout:.0f} s"
        time.sleep(0.01)


def run_to_end(pool: WorkerPool) -> None:
    pool.begin(pool.target())
    wait_until(pool.finished, "finished")
    pool.close()
    assert pool.failure() is None


def test_the_pool_sleeps_between_calls_and_continues_with_the_same_workers():
    model = Scale()
    model.share_memory()
    pool, _ = make_pool(model, workers=2, steps=300)
    pool.begin(300)
    wait_until(pool.finished, "finished")
    pids = [p.pid for p in pool.procs]
    assert pool.startup_seconds > 0 and pool.done() == 300 and sum(pool.per_worker()) == 300
    time.sleep(0.2)  # idle workers claim nothing past the budget
    assert pool.counters.claimed.value == 300 and pool.alive()
    pool.begin(700)  # the next call: the same processes go on, no start-up
    wait_until(pool.finished, "finished")
    assert [p.pid for p in pool.procs] == pids and pool.startup_seconds == 0.0
    assert pool.done() == 700 and sum(pool.per_worker()) == 400  # per_worker counts this call only
    applied = (-model.w.detach() / LR).round()  # both calls' updates landed on the one shared model
    assert torch.all(applied <= 700) and torch.all(applied >= 0.9 * 700), applied
    pool.close()
    assert [p.exitcode for p in pool.procs] == [0, 0] and not pool.alive()


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_workers_update_one_shared_model(start_method):
    model = Scale()
    model.share_memory()
    steps = 300  # paced (4 ms a step): one worker cannot take them all before the other wakes
    pool, _ = make_pool(model, workers=2, steps=steps, start_method=start_method, loss=paced_linear_loss)
    run_to_end(pool)
    per_worker = pool.per_worker()
    assert pool.done() == steps and sum(per_worker) == steps
    assert pool.counters.claimed.value == steps
    assert all(n > 0 for n in per_worker), per_worker
    # Every update subtracts exactly LR from every coordinate of the ONE model in this process. If the
    # workers had private copies, nothing would show here; lock-free races may lose a rare update.
    applied = (-model.w.detach() / LR).round()
    assert torch.all(applied > max(per_worker)), (applied, per_worker)
    assert torch.all(applied <= steps) and torch.all(applied >= 0.9 * steps), (applied, per_worker)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm device")
def test_workers_update_one_gpu_model_through_cuda_ipc():
    model = Scale().cuda()  # one copy in GPU memory; spawned workers map it by CUDA IPC
    steps = 400
    pool, state = make_pool(model, workers=2, steps=steps, momentum=0.5, start_method="spawn", device="cuda")
    assert all(spec.device == model.w.device for spec in pool.specs)  # "cuda" is the model's GPU, with its index
    run_to_end(pool)
    per_worker = pool.per_worker()
    assert pool.done() == steps and sum(per_worker) == steps and all(n > 0 for n in per_worker), per_worker
    # with momentum 0.5 and gradient 1, worker w's k-th update subtracts LR * (2 - 2^(1-k))
    expected = sum(LR * (2 - 2.0 ** (1 - k)) for n in per_worker for k in range(1, n + 1))
    got = -model.w.detach().cpu()
    assert torch.all(got <= expected + 1e-4) and torch.all(got >= 0.9 * expected), (got, expected)
    for w, k in enumerate(per_worker):
        torch.testing.assert_close(state.buffers[w][0].cpu(), torch.full((8,), 2 - 2.0 ** (1 - k)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm device")
def test_on_a_gpu_an_update_counted_has_landed():
    """The main process reads `done` to know how many updates the model holds (averaging rounds, the final
    synchronous one, checkpoints), but nothing orders its kernels after a worker's: a worker counts an
    update only once its kernels ran. One worker, no momentum: after each call the model is exactly
    -LR x the updates counted (w is 128 MiB, so an update still in flight would be seen)."""
    model = WideSum(1 << 25).cuda()
    pool, _ = make_pool(model, workers=1, steps=40, start_method="spawn", device="cuda", loss=mean_loss)
    for target in range(4, 41, 4):
        pool.begin(target)
        wait_until(pool.finished, "finished")
        ends = model.w.detach()[[0, -1]]  # read at once, in this process's own stream
        assert pool.done() == target and ends.tolist() == [-LR * target] * 2, (target, ends.tolist())
    pool.close()
    assert pool.failure() is None


def test_each_worker_keeps_its_own_momentum():
    model = Scale()
    model.share_memory()
    m = 0.5
    pool, state = make_pool(model, workers=2, steps=200, momentum=m)
    run_to_end(pool)
    for w, k in enumerate(pool.per_worker()):
        # gradient 1 every step: worker w's buffer after its k steps is 1 + m + ... + m^(k-1)
        expected = sum(m**i for i in range(k))
        assert state.ready[w, 0] == 1
        torch.testing.assert_close(state.buffers[w][0], torch.full((8,), expected), rtol=1e-6, atol=0)


def test_staleness_counts_the_other_workers_updates_between_read_and_update():
    counters = SharedCounters.create(torch.multiprocessing.get_context("fork"), 3, 1, 0, 100)
    # workers 0 and 1 read the model with no update applied; worker 1 applies first (nothing landed
    # since its read), then worker 0 (worker 1's update landed); worker 2 read after both
    counters.finish(1, 0.5, read_at=0)
    counters.finish(0, 0.5, read_at=0)
    counters.finish(2, 0.5, read_at=2)
    counters.finish(1, 0.5, read_at=1)  # read before worker 0's update and worker 2's landed
    assert counters.stale[:] == [1, 2, 0] and counters.done.value == 4


def test_a_worker_counts_the_updates_that_land_while_it_computes():
    model = Scale()
    params = list(model.parameters())
    counters = SharedCounters.create(torch.multiprocessing.get_context("fork"), 2, 1, 0, 1)
    counters.lrs[:] = [LR]
    counters.go.set()

    def loss_with_another_update(out, target):  # worker 1's update lands during worker 0's forward
        counters.finish(1, 0.0, read_at=counters.done.value)
        counters.request_stop()  # worker 0 ends after this step
        return linear_loss(out, target)

    spec = WorkerSpec(
        worker=0,
        model=model,
        loss_fn=loss_with_another_update,
        dataset=ones_dataset(),
        shard=torch.arange(64),
        batch_size=8,
        seed=0,
        device=torch.device("cpu"),
        groups=[GroupHyper(0.0, 0.0, 0.0, False)],
        group_of=[0] * len(params),
        momentum=MomentumState.zeros(params, 2),
        counters=counters,
        block=None,
        prepassm_steps=0,
        threads=1,
        errors=None,
    )
    HogwildWorker(spec).run()
    # worker 0 read the model before worker 1's update, and applied its own after it
    assert counters.stale[:] == [1, 0] and counters.per_worker[:] == [1, 1] and counters.done.value == 2


@pytest.mark.parametrize("workers", [1, 3])
def test_mean_staleness_of_real_workers(workers):
    model = Scale()
    model.share_memory()
    pool, _ = make_pool(model, workers=workers, steps=600)
    pool.begin(600)
    wait_until(pool.finished, "finished")
    stale, per_worker = pool.counters.stale[:], pool.per_worker()
    if workers == 1:  # nobody else writes: every update is computed on the model as it is applied to
        assert stale == [0] and pool.mean_staleness() == 0.0
    else:
        # one worker's read-to-update windows do not overlap, so another's update falls in at most one:
        # a worker's staleness is at most the updates the others applied
        assert all(0 <= s <= 600 - n for s, n in zip(stale, per_worker)), (stale, per_worker)
        assert pool.mean_staleness() == sum(stale) / 600
    pool.begin(900)  # a second call, on the same workers, counts its own updates only
    wait_until(pool.finished, "finished")
    assert pool.done() == 900 and sum(pool.per_worker()) == 300
    assert pool.mean_staleness() == (sum(pool.counters.stale[:]) - sum(stale)) / 300
    pool.close()
    assert pool.failure() is None


def test_a_failing_worker_is_reported():
    model = Scale()
    model.share_memory()
    pool, _ = make_pool(model, workers=2, steps=100, loss=failing_loss)
    pool.begin(100)
    failures: list = []
    wait_until(lambda: failures.append(pool.failure()) or failures[-1] is not None, "failed")
    pool.close()
    failure = failures[-1]
    assert failure is not None and "ArithmeticError: deliberate failure in a worker" in failure, failure


def in_process_worker(model: torch.nn.Module, worker: int, blocks, prepassm_steps: int) -> HogwildWorker:
    params = list(model.parameters())
    ctx = torch.multiprocessing.get_context("fork")
    counters = SharedCounters.create(ctx, 2, 1, 0, 100)
    counters.lrs[:] = [0.1]
    spec = WorkerSpec(
        worker=worker,
        model=model,
        loss_fn=torch.nn.functional.cross_entropy,
        dataset=None,
        shard=None,
        batch_size=4,
        seed=0,
        device=torch.device("cpu"),
        groups=[GroupHyper(0.9, 0.0, 1e-4, False)],
        group_of=[0] * len(params),
        momentum=MomentumState.zeros(params, 2),
        counters=counters,
        block=None if blocks is None else blocks[worker],
        prepassm_steps=prepassm_steps,
        threads=1,
        errors=None,
    )
    return HogwildWorker(spec)


@pytest.mark.parametrize("worker", [0, 1])
def test_lpp_partitioned_step_touches_only_the_workers_block(worker):
    from algorithms.lap.blocks import partition_blocks

    torch.manual_seed(0)
    model = SmallCNN()
    params = list(model.parameters())
    blocks = partition_blocks([p.numel() for p in params], 2)
    hw = in_process_worker(model, worker, blocks, prepassm_steps=2)
    batch = (torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,)))
    start, stop = blocks[worker]
    for node_step, partitioned in [(0, False), (1, False), (2, False), (3, True), (4, False), (5, True)]:
        before = [p.detach().clone() for p in params]
        bufs = [b.clone() for b in hw.buffers]
        ready = hw.ready.clone()
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        grads = [p.grad.clone() for p in params]
        hw.step(batch, node_step)
        for i, (p, b, g) in enumerate(zip(params, before, grads)):
            if partitioned and not start <= i < stop:
                assert torch.equal(p, b), f"step {node_step}: param {i} outside block {blocks[worker]} changed"
                assert torch.equal(hw.buffers[i], bufs[i]) and hw.ready[i] == ready[i]
                continue
            # SGD with this worker's momentum: the block's gradient is the full back-propagation's
            d_p = g + 1e-4 * b
            buf = 0.9 * bufs[i] + d_p if ready[i] else d_p
            torch.testing.assert_close(hw.buffers[i], buf)
            torch.testing.assert_close(p, b - 0.1 * buf)


class WithBatch:
    """An apps-style dataset: batch(indices) -> (inputs, targets)."""

    def __len__(self) -> int:
        return 10

    def batch(self, indices: torch.Tensor):
        return indices.float() * 2, indices


class ItemWise(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int):
        return torch.tensor([float(i)]), i


@pytest.mark.parametrize(
    "dataset",
    [WithBatch(), TensorDataset(torch.arange(10.0) * 2, torch.arange(10)), ItemWise()],
    ids=["batch-method", "tensor-dataset", "item-wise"],
)
def test_batches_cover_the_shard_once_per_pass(dataset):
    from algorithms.lap.worker import batches

    shard = torch.tensor([1, 3, 5, 7, 9])
    it = batches(dataset, shard, batch_size=2, seed=3)
    for _ in range(2):  # two passes: 2 + 2 + 1 items each, every shard index exactly once
        seen = [next(it)[1] for _ in range(3)]
        assert [len(t) for t in seen] == [2, 2, 1]
        assert sorted(torch.cat([torch.as_tensor(t) for t in seen]).tolist()) == shard.tolist()
