"""pycomm's exceptions. They are defined by the compiled core, so the C++ runtime raises them directly:

- PycommError (a RuntimeError): any failure of the communication runtime, e.g. using a broken or
  shut-down communicator, or pycomm before pycomm.init().
- StallError (a PycommError): an op did not complete within PYCOMM_TIMEOUT seconds; the message names
  the op, its sequence number and sizes. The communicator is broken afterwards.
- MismatchError (a PycommError): with PYCOMM_DEBUG=1, ranks submitted different collectives; the
  message names both ranks' ops.

Bad arguments raise TypeError / ValueError naming the argument, as Python code does."""
from __future__ import annotations

from pycomm._build import core

PycommError = core().PycommError
StallError = core().StallError
MismatchError = core().MismatchError

__all__ = ["PycommError", "StallError", "MismatchError"]
