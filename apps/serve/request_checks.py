"""The checks every generation request passes on rank 0, whichever API it came through, before any
value reaches the pipeline's int64 wire or a kernel: each field's range (BadRequest naming the
field, 400), the prompt's characters against the vocabulary, and the defaults filled in. The result
is a scheduler Request whose every number is safe to send and to sample with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional, Union

from pydantic import Field

from apps.serve.engine import random_seed
from apps.serve.http_errors import BadRequest
from apps.serve.scheduler import Request
from apps.serve.text_codec import Vocabulary

JsonFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]  # a JSON number (an integer too), finite
MAX_TEMPERATURE = 100.0  # softmax at T=100 is already close to uniform over a char vocabulary
INT64 = 2**63
MAX_STOPS, MAX_STOP_CHARS = 4, 256  # OpenAI's limit on stop strings; a bound on their length
MAX_N = 16  # samples of one request (OpenAI's `n`): each takes a slot, so one request cannot fill the server


@dataclass(frozen=True)
class Limits:
    """What the served model and the server's options allow."""

    vocab: Vocabulary
    block_size: int
    max_tokens: int  # --max-tokens-limit: the most one request may ask for


def prompt_ids(limits: Limits, text: str, field: str) -> list[int]:
    if not text:
        raise BadRequest(field, "must not be empty")
    try:
        return limits.vocab.encode(text)
    except ValueError as e:
        raise BadRequest(field, str(e).removeprefix("prompt: ")) from None


def max_tokens(value: Optional[int], default: int, limits: Limits, field: str = "max_tokens") -> int:
    """Generation goes past the context (the window rule), so only --max-tokens-limit bounds it."""
    n = min(default, limits.max_tokens) if value is None else value
    if not 1 <= n <= limits.max_tokens:
        raise BadRequest(
            field, f"must be between 1 and {limits.max_tokens} (this server's --max-tokens-limit), got {n}"
        )
    return n


def temperature(value: Optional[float], default: float) -> float:
    t = default if value is None else float(value)
    if not 0.0 <= t <= MAX_TEMPERATURE:
        raise BadRequest("temperature", f"must be between 0 (greedy) and {MAX_TEMPERATURE:g}, got {t}")
    return t


def top_k(value: Optional[int], limits: Limits) -> Optional[int]:
    """None: no limit; a value at or above the vocabulary's size is no limit either."""
    if value is None:
        return None
    if value < 1:
        raise BadRequest("top_k", f"must be >= 1 or null (no limit), got {value}")
    return value if value < len(limits.vocab) else None


def top_p(value: Optional[float]) -> float:
    p = 1.0 if value is None else float(value)
    if not 0.0 < p <= 1.0:
        raise BadRequest("top_p", f"must be in (0, 1] (1: no nucleus cut), got {p}")
    return p


def seed(value: Optional[int]) -> int:
    if value is None:
        return random_seed()
    if not -INT64 <= value < INT64:
        raise BadRequest("seed", f"must be a 64-bit integer, got {value}")
    return value


def samples(value: Optional[int]) -> int:
    n = 1 if value is None else value
    if not 1 <= n <= MAX_N:
        raise BadRequest("n", f"must be between 1 and {MAX_N} (independent samples of the request), got {n}")
    return n


def nth_seed(value: int, i: int) -> int:
    """The seed of a request's i-th sample (OpenAI's `n`): value + i, wrapped to stay a 64-bit integer."""
    return (value + i + INT64) % (2 * INT64) - INT64


def stops(value: Union[str, list[str], None]) -> tuple[str, ...]:
    found = [value] if isinstance(value, str) else list(value or [])
    if len(found) > MAX_STOPS:
        raise BadRequest("stop", f"at most {MAX_STOPS} stop strings, got {len(found)}")
    if any(len(s) > MAX_STOP_CHARS for s in found):
        raise BadRequest("stop", f"a stop string is at most {MAX_STOP_CHARS} characters")
    return tuple(s for s in found if s)


def generation(
    ids: list[int], n: int, temp: float, k: Optional[int], p: float, seed_value: int, stop: tuple[str, ...] = ()
) -> Request:
    return Request(ids, n, temp, k, seed_value, p, stop)
