"""pycomm as a torch.distributed backend: `import pycomm` registers "pycomm", so unchanged torch.distributed
code (DDP, FSDP2's fully_shard, torch.distributed.pipelining, DeviceMesh) runs on pycomm's core with

    dist.init_process_group("pycomm")      # under mpirun or srun (no env variables needed) or torchrun

Ops: all_reduce (SUM, AVG, MIN, MAX natively; PRODUCT, BAND, BOR, BXOR via an all-gather), broadcast,
all_gather(_into_tensor), reduce_scatter(_tensor), all_to_all(_single, any split sizes), barrier, send / recv /
isend / irecv / batch_isend_irecv, with Works (wait(), wait(timeout), get_future()). CPU tensors.
Others (reduce, gather, scatter, recv from any source, PREMUL_SUM) raise NotImplementedError naming the op.
Files: process_group.py (the ops), alltoallv.py (all-to-alls of unequal chunks), work.py, groups.py (which
communicator a group runs on), reduce_ops.py, rendezvous.py (mpirun and srun without torch's variables)."""

from __future__ import annotations

import torch.distributed as dist

from pycomm.torch_backend.process_group import NAME, PycommProcessGroup

__all__ = ["NAME", "PycommProcessGroup", "register"]


def register() -> None:
    """Registers backend "pycomm" with torch.distributed (once per process; `import pycomm` calls it)."""
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    from pycomm.torch_backend import groups, rendezvous

    dist.Backend.register_backend(NAME, groups.create, extended_api=True, devices=["cpu"])
    rendezvous.install()
