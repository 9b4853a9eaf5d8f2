"""pycomm's exceptions. The compiled core raises these very classes (csrc/bindings/comm.cc translates
its C++ exceptions to them), so they work with or without pycomm._C built:

- PycommError (a RuntimeError): any failure of the communication runtime, e.g. using a broken or
  shut-down communicator, or pycomm before pycomm.init().
- StallError (a PycommError): an op did not complete within PYCOMM_TIMEOUT seconds; the message names
  the op, its sequence number and sizes. The communicator is broken afterwards.
- MismatchError (a PycommError): ranks submitted different collectives (kind, size, dtype, reduce op
  or root), or a recv's size or dtype differs from its send's; the message names both ranks' ops
  and sequence numbers. See docs/diagnostics.md, "The op check", for what is checked in which mode.
- SettingError (a ValueError): a PYCOMM_* environment variable holds a value it does not accept; the
  message names the variable, the value and what it accepts (pycomm/settings.py). SettingWarning:
  an unknown PYCOMM_* variable is set (a misspelling; the message names the closest real one).

Bad arguments raise TypeError / ValueError naming the argument, as Python code does."""

from __future__ import annotations

__all__ = ["PycommError", "StallError", "MismatchError", "SettingError", "SettingWarning"]


class PycommError(RuntimeError):
    """A failure of pycomm's communication runtime."""


class StallError(PycommError):
    """An op did not complete within PYCOMM_TIMEOUT seconds (its communicator is now broken)."""


class MismatchError(PycommError):
    """Ranks submitted different ops at the same point, or a recv does not fit its send."""


class SettingError(ValueError):
    """A PYCOMM_* environment variable holds a value it does not accept."""


class SettingWarning(UserWarning):
    """A PYCOMM_* environment variable that pycomm does not know is set (it is ignored)."""


def named(error: PycommError, op: str) -> PycommError:
    """`error` (same class) with the user's compound op `op` named in front of what failed inside it."""
    return type(error)(f"{op} failed: {error}")
