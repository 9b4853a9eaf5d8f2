"""pycomm: a composable communication runtime for distributed deep-learning training."""
from __future__ import annotations

from pycomm._build import build_info
from pycomm import kernels
from pycomm.store import TCPStore

__all__ = ["build_info", "kernels", "TCPStore"]
__version__ = "0.1.0"
