"""pycomm's exceptions. The compiled core raises these very classes (csrc/bindings/comm.cc translates
its C++ exceptions to them), so they work with or without pycomm._C built:

- PycommError (a RuntimeError): any failure of the communication runtime, e.g. using a broken or
  shut-down communicator, or pycomm before pycomm.init().
- StallError (a PycommError): an op did not complete within PYCOMM_TIMEOUT seconds; the message names
  the op, its sequence number and sizes. The communicator is broken afterwards.
- MismatchError (a PycommError): with PYCOMM_DEBUG=1, ranks submitted different collectives; the
  message names both ranks' ops.

Bad arguments raise TypeError / ValueError naming the argument, as Python code does."""
from __future__ import annotations

__all__ = ["PycommError", "StallError", "MismatchError"]


class PycommError(RuntimeError):
    """A failure of pycomm's communication runtime."""


class StallError(PycommError):
    """An op did not complete within PYCOMM_TIMEOUT seconds (its communicator is now broken)."""


class MismatchError(PycommError):
    """PYCOMM_DEBUG=1: ranks submitted different collectives at the same point."""
