"""pycomm: a composable communication runtime for distributed deep-learning training."""
from __future__ import annotations

import sys as _sys

_torch_first = "torch" not in _sys.modules
import torch as _torch  # noqa: E402,F401  (every module below needs it; first, so the start-up profile can time it)

from pycomm import startup_profile  # noqa: E402
if _torch_first:
    startup_profile.mark("torch_imported")
del _sys, _torch, _torch_first
from pycomm._build import build_info  # noqa: E402
from pycomm import kernels, relative, settings
from pycomm.averaging import LayerwiseAverager
from pycomm.codecs import Int8Codec, OneBitCodec
from pycomm.communicator import Communicator
from pycomm.flat_shards import flat_shard_numel
from pycomm.grad_buckets import GradientBuckets
from pycomm.errors import MismatchError, PycommError, SettingError, StallError
from pycomm.launch_env import LaunchEnv
from pycomm.mesh import Mesh
from pycomm.ops import AVG, MAX, MIN, SUM, ReduceOp
from pycomm.p2p import ANY_SOURCE, ANY_TAG, Message, Received, TensorWork
from pycomm.quantized import ErrorFeedback
from pycomm.runtime import abort, finalize, from_mpi4py, init, is_initialized, stats, world
from pycomm.store import TCPStore
from pycomm.work import Work

__all__ = ["build_info", "kernels", "relative", "Communicator", "Work", "ReduceOp", "SUM", "AVG", "MAX", "MIN", "init",
           "world", "from_mpi4py", "finalize", "abort", "stats", "is_initialized", "LaunchEnv", "PycommError",
           "StallError", "MismatchError", "Int8Codec", "OneBitCodec", "TCPStore", "LayerwiseAverager", "ErrorFeedback",
           "flat_shard_numel", "GradientBuckets", "Mesh", "SettingError", "settings", "ANY_SOURCE", "ANY_TAG",
           "Message", "Received", "TensorWork"]
__version__ = "0.1.0"

settings.check_environment()  # a malformed PYCOMM_* fails `import pycomm`; a misspelt one warns
startup_profile.mark("pycomm_imported")
