"""pycomm: a composable communication runtime for distributed deep-learning training."""
from __future__ import annotations

from pycomm._build import build_info
from pycomm import kernels
from pycomm.codecs import Int8Codec, OneBitCodec
from pycomm.averaging import LayerwiseAverager
from pycomm.quantized import ErrorFeedback

__all__ = ["Int8Codec", "OneBitCodec", "build_info", "kernels"]
__all__ += ["LayerwiseAverager", "ErrorFeedback"]
__version__ = "0.1.0"
