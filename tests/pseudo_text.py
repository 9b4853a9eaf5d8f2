"""A seeded pseudo-text for GPT runs in tests (tiny Shakespeare is not always at hand): words over a small
alphabet, separated by spaces, newlines and punctuation."""

from __future__ import annotations

import random
from pathlib import Path


def write(path: Path, chars: int = 20_000, letters: str = "abcdefghij", words: int = 200) -> Path:
    rng = random.Random(0)
    vocabulary = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 7))) for _ in range(words)]
    text, n = [], 0
    while n < chars:
        text.append(rng.choice(vocabulary) + rng.choice("  \n,."))
        n += len(text[-1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(text))
    return path
