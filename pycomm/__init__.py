"""pycomm: a composable communication runtime for distributed deep-learning training.

A compiled core (MPI, NCCL/RCCL, gloo and one-rank transports; CPU, CUDA and HIP kernels) under a
Python API on torch tensors. Start it once per process, under any launcher (mpirun, srun, torchrun,
or plain python for one rank):

    import torch, pycomm
    comm = pycomm.init()                     # backend="auto" | "mpi" | "gloo" | "nccl" | "local"
    t = torch.ones(4) * comm.rank
    comm.allreduce(t, op=pycomm.SUM)         # in place, blocking; async_op=True returns a Work
    print(comm.rank, comm.size, t)

Each rank must feed its own part of the data; the training methods wrap a torch optimizer:
`algorithms.CommOptimizer(opt, algorithm="plsgd", comm=comm, model=model)` (the algorithms package).

Communicator: allreduce, broadcast, allgather, reduce_scatter, alltoall, barrier, send / recv (and
isend / irecv), send_tensor / recv_tensor / probe (any source, shapes the receiver does not know),
split, split_by_node, dup; compound ops allreduce_coalesced, broadcast_coalesced,
allreduce_quantized (Int8Codec, OneBitCodec, ErrorFeedback), reduce_scatter_coalesced /
allgather_coalesced (ZeRO's flat shards, flat_shard_numel). Also: GradientBuckets (DDP-style bucketed
reduction during backward), LayerwiseAverager, TCPStore, stats(), build_info(), abort(), finalize();
errors PycommError, StallError (an op past PYCOMM_TIMEOUT), MismatchError (ranks calling different
ops), SettingError (a bad PYCOMM_* variable: pycomm.settings, `python -m pycomm.settings_doc`).

torch.distributed backend: `import pycomm` registers "pycomm", so `dist.init_process_group("pycomm")` runs
DDP, FSDP2, pipelining and DeviceMesh code on pycomm unchanged (pycomm/torch_backend); DDP communication
hooks from the codecs: pycomm.ddp_hooks.

Documentation: README.md (getting started), docs/ (settings, diagnostics, performance), csrc/README.md."""

import sys as _sys

_torch_first = "torch" not in _sys.modules
try:
    import torch as _torch  # noqa: E402,F401  (every module below needs it; first, so the start-up profile can time it)
except ImportError as _e:
    # pip install . declares no torch (an unpinned one pulls GBs of CUDA wheels): say which one to install
    raise ImportError(
        "pycomm needs PyTorch, which is not installed. Tested with torch 2.13.0; on a CPU-only "
        "machine install its CPU build: pip install torch==2.13.0 --index-url "
        "https://download.pytorch.org/whl/cpu (README.md, Install)"
    ) from _e

from pycomm import startup_profile  # noqa: E402

if _torch_first:
    startup_profile.mark("torch_imported")
del _sys, _torch, _torch_first
from pycomm import kernels, relative, settings
from pycomm._build import build_info  # noqa: E402
from pycomm.codecs import Int4Codec, Int8Codec, OneBitCodec
from pycomm.communicator import Communicator
from pycomm.distributed_sampler import DistributedSampler
from pycomm.errors import MismatchError, PycommError, SettingError, StallError
from pycomm.flat_shards import flat_shard_numel
from pycomm.grad_buckets import GradientBuckets
from pycomm.launch_env import LaunchEnv
from pycomm.layerwise_averager import LayerwiseAverager
from pycomm.mesh import Mesh
from pycomm.ops import AVG, MAX, MIN, SUM, ReduceOp
from pycomm.p2p import ANY_SOURCE, ANY_TAG, Message, Received, TensorWork
from pycomm.quantized import ErrorFeedback
from pycomm.runtime import abort, finalize, from_mpi4py, init, is_initialized, stats, world
from pycomm.store import TCPStore
from pycomm.tracing.profiling import profile
from pycomm.work import Work

__all__ = [
    "build_info",
    "kernels",
    "relative",
    "Communicator",
    "Work",
    "ReduceOp",
    "SUM",
    "AVG",
    "MAX",
    "MIN",
    "init",
    "world",
    "from_mpi4py",
    "finalize",
    "abort",
    "stats",
    "is_initialized",
    "LaunchEnv",
    "PycommError",
    "StallError",
    "MismatchError",
    "Int8Codec",
    "Int4Codec",
    "OneBitCodec",
    "TCPStore",
    "LayerwiseAverager",
    "ErrorFeedback",
    "flat_shard_numel",
    "GradientBuckets",
    "Mesh",
    "SettingError",
    "settings",
    "ANY_SOURCE",
    "ANY_TAG",
    "Message",
    "Received",
    "TensorWork",
    "DistributedSampler",
    "profile",
]
__version__ = "0.1.0"

from pycomm import torch_backend  # noqa: E402

torch_backend.register()  # dist.init_process_group("pycomm") (pycomm/torch_backend)
settings.check_environment(table=settings.TABLE)  # a malformed PYCOMM_* fails `import pycomm`; a misspelt one warns
startup_profile.mark("pycomm_imported")
