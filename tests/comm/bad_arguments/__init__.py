"""Generated bad-argument cases for pycomm's public API (tests/comm/test_bad_arguments.py), one module per
family of callables (kernels, codecs, store, communicator; what they share in cases.py).

Each public callable is described once: its good arguments, and for each argument the kind of value
it takes. Every case replaces one argument of a good call by one bad value of that kind (wrong type,
out of range, non-finite, tensor of the wrong dtype, size or layout). A case is *clear* when the call
raises TypeError or ValueError whose message names the argument, *unclear* when it raises anything
else (or does not name it), *silent* when it returns.

`python3 -m tests.comm.bad_arguments` prints the counts and every case that is not clear."""

from __future__ import annotations

import re

from tests.comm.bad_arguments.cases import Case
from tests.comm.bad_arguments.codecs import codec_cases
from tests.comm.bad_arguments.communicator import averager_cases, communicator_cases
from tests.comm.bad_arguments.kernels import kernel_cases
from tests.comm.bad_arguments.store import store_cases


def all_cases() -> list[Case]:
    return [*kernel_cases(), *codec_cases(), *store_cases(), *averager_cases(), *communicator_cases()]


def outcome(case: Case) -> tuple[str, str]:
    """("clear" | "unclear" | "silent", detail)."""
    try:
        case.call()
    except case.errors as e:
        message = str(e)
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(case.arg)}(?![A-Za-z0-9_])", message):
            return "clear", message
        return "unclear", f"{type(e).__name__} not naming {case.arg!r}: {message}"
    except Exception as e:  # noqa: BLE001  (classifying is the point)
        return "unclear", f"{type(e).__name__}: {e}"
    return "silent", "accepted"
