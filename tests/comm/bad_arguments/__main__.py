"""`python3 -m tests.comm.bad_arguments`: the counts, and every case that is not clear."""

from __future__ import annotations

import sys

from tests.comm.bad_arguments import all_cases, outcome


def main() -> int:
    counts = {"clear": 0, "unclear": 0, "silent": 0}
    for case in all_cases():
        kind, detail = outcome(case)
        counts[kind] += 1
        if kind != "clear":
            print(f"{kind:8s} {case.name}: {detail[:200]}")
    print(
        f"{sum(counts.values())} cases: {counts['clear']} clear, {counts['unclear']} unclear, "
        f"{counts['silent']} silently accepted"
    )
    return 0 if counts["clear"] == sum(counts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
