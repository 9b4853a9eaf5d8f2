"""Communicator.dup(): a second communicator on the same ranks whose ops never wait behind the
first's. Run under mpirun with 2 ranks: `python -m tests.comm.workers.p2p_dup`."""

from __future__ import annotations

import threading

import torch

import pycomm


def check_blocked_recv_does_not_block_the_dup(world: pycomm.Communicator, dup: pycomm.Communicator) -> None:
    """Rank 1 blocks in recv on `world` while both ranks complete a send/recv and an all-reduce on
    `dup`; only then does rank 0 send the message rank 1 waits for on `world`."""
    got = torch.zeros(4)
    errors: list[BaseException] = []
    if world.rank == 1:
        entering = threading.Event()

        def blocked() -> None:
            try:
                entering.set()
                world.recv(got, 0, tag=5)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        waiter = threading.Thread(target=blocked)
        waiter.start()
        entering.wait()
        dup.recv(ping := torch.zeros(3), 0, tag=5)  # the same tag on the other communicator
        assert ping.tolist() == [1.0, 2.0, 3.0], ping
        dup.send_tensor(torch.tensor([7]), 0, tag=5)
    else:
        dup.send(torch.tensor([1.0, 2.0, 3.0]), 1, tag=5)
        assert dup.recv_tensor(1, tag=5).tensor.tolist() == [7]
    x = torch.full((1000,), float(world.rank + 1))
    dup.allreduce(x, op=pycomm.SUM)
    assert bool((x == 3.0).all()), x
    if world.rank == 1:
        assert waiter.is_alive() and not got.any(), "the recv on world completed before its message was sent"
    dup.barrier()  # rank 1 has seen its recv still waiting: now rank 0 sends it
    if world.rank == 0:
        world.send(torch.full((4,), 9.0), 1, tag=5)
    else:
        waiter.join()
        assert not errors, errors
        assert got.tolist() == [9.0] * 4, got


def check_two_threads_two_channels(world: pycomm.Communicator, dup: pycomm.Communicator) -> None:
    """A pipeline's forward and backward channels: on every rank one thread runs collectives and
    messages on `world`, another on `dup`, at the same time and with different sizes. On one
    communicator the two threads' ops would interleave differently on the two ranks; on two, each
    keeps its own order."""
    errors: list[BaseException] = []
    peer = 1 - world.rank

    def channel(comm: pycomm.Communicator, numel: int, steps: int) -> None:
        try:
            for step in range(steps):
                x = torch.full((numel,), float(step + world.rank))
                comm.allreduce(x, op=pycomm.SUM)
                assert bool((x == 2 * step + 1).all()), (comm.name, step, x[:3])
                w = comm.isend_tensor(torch.full((numel % 7 + 1,), float(step)), peer, tag=step)
                got = comm.recv_tensor(peer, tag=step)
                assert got.tensor.tolist() == [float(step)] * (numel % 7 + 1), (comm.name, step)
                w.wait()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [
        threading.Thread(target=channel, args=(world, 100, 30)),
        threading.Thread(target=channel, args=(dup, 333, 30)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def main() -> None:
    pycomm.init()
    world = pycomm.world()
    assert world.size == 2, "run with 2 ranks"
    dup = world.dup()
    assert (dup.rank, dup.size, dup.backend, dup.name) == (world.rank, 2, world.backend, "world.dup()"), dup
    check_blocked_recv_does_not_block_the_dup(world, dup)
    check_two_threads_two_channels(world, dup)
    world.barrier()
    dup.shutdown()
    world.barrier()  # the original outlives its duplicate
    print(f"rank {world.rank}: dup checks passed", flush=True)
    pycomm.finalize()


if __name__ == "__main__":
    main()
