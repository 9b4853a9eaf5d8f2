"""What a server or ssp rank checks in a signed message before acting on it, and how it drops one that fails.

A signed peer holds the run's secret, but a bug (a diverged worker's NaN gradient, another version of the
code) must still never crash a rank nor reach the model. Each check raises wire.WireError naming the field,
what it held and what was expected; the receiver drops the message (Drops: logged the first time per
cause, then counted) and, for a push, tells the worker it was rejected (so it takes the parameters and goes
on) without applying it."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from algorithms.ps import payload, wire
from algorithms.ps.wire import Message, WireError, is_int

# how far past the last step its server knows of (its clock, or the step its greeting said) a worker's push
# may be: a server restarted from an older checkpoint knows an older step, and a worker resumed from its own
# checkpoint greets before it learns where it continues; a forged far step (it would make the server drop
# the worker's real pushes as duplicates) is refused
STEP_AHEAD = 10_000


class Drops:
    """Messages dropped, per cause: the first of each cause is logged, the others only counted."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.counts: dict[str, int] = {}

    def note(self, cause: str, detail: str) -> None:
        self.counts[cause] = self.counts.get(cause, 0) + 1
        if self.counts[cause] == 1:
            self.log(f"dropped {detail} ({cause}; later ones are only counted)")

    def receive(self, sock: Any) -> tuple[bytes, Message] | None:
        """The next routed message on `sock`, or None when it was dropped (unsigned: answered with nothing,
        so the peer learns nothing; malformed)."""
        try:
            return wire.recv(sock, routed=True)
        except wire.Unauthenticated as e:
            self.note("unauthenticated", f"a message from a peer without this run's secret: {e}")
        except WireError as e:
            self.note("malformed", f"a malformed message: {e}")
        return None


def natural(msg: Message, key: str, default: Any = None) -> int:
    """The header's integer `key` (>= 0); `default` when absent and a default is given."""
    value = msg.get(key, default)
    if not is_int(value) or value < 0:
        raise WireError(f"{msg.kind} message: {key} must be an integer >= 0, got {value!r:.40}")
    return value


def push_header(msg: Message, known_step: int) -> int:
    """The step of a push whose header fields are sound; `known_step`: the latest step of that worker the
    server knows (-1 when none)."""
    step = natural(msg, "step")
    natural(msg, "version")
    if step > known_step + 1 + STEP_AHEAD:
        raise WireError(
            f"push of step {step} from worker {msg.get('rank')}, whose last known step is {known_step}: "
            f"at most {STEP_AHEAD} steps ahead are plausible"
        )
    lrs = msg.get("lrs")
    if lrs is not None and not (isinstance(lrs, list) and all(_finite(v) and v >= 0 for v in lrs)):
        raise WireError(f"push: lrs must be a list of finite learning rates >= 0, got {lrs!r:.60}")
    if msg.get("loss") is not None and not isinstance(msg.get("loss"), (int, float)):
        raise WireError(f"push: loss must be a number, got {msg.get('loss')!r:.40}")
    return step


def gradient(msg: Message, codec: Any, numel: int) -> torch.Tensor:
    """The finite gradient of `numel` elements a push (or ssp grad) carries."""
    if msg.get("codec") is not None and natural(msg, "numel") != numel:  # before decoding allocates it
        raise WireError(f"{msg.kind} message: numel {msg.get('numel')} for a model of {numel}")
    try:
        grad = payload.decode(msg.header, msg.tensors, codec)
    except WireError:
        raise
    except (KeyError, ValueError, TypeError, RuntimeError) as e:  # a header that does not fit its tensors
        raise WireError(f"{msg.kind} message: its gradient does not decode ({type(e).__name__}: {e})") from None
    return finite_vector(msg.kind, grad, numel)


def finite_vector(what: str, vector: torch.Tensor, numel: int) -> torch.Tensor:
    """`vector` as one flat tensor of `numel` finite values, else WireError."""
    if vector.numel() != numel:
        raise WireError(f"{what} message carries {vector.numel()} values for a model of {numel}")
    if not bool(torch.isfinite(vector).all()):
        raise WireError(f"{what} message carries NaN or infinite values")
    return vector.reshape(-1)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
