"""pycomm: a composable communication runtime for distributed deep-learning training."""
from __future__ import annotations

from pycomm._build import build_info
from pycomm import kernels

__all__ = ["build_info", "kernels"]
__version__ = "0.1.0"
