"""torch's all-to-alls with chunks of any size (all_to_all_single's split sizes, all_to_all's tensor lists) on
pycomm's alltoall, which sends equal chunks: every rank learns the longest chunk any rank sends (an all-reduce
MAX of one integer, so every rank picks the same padded size), pads each of its chunks to it, runs one
alltoall, and copies each received chunk's real part out. With equal chunks nothing is padded or copied."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from pycomm.communicator import Communicator
from pycomm.ops import ReduceOp


def split_sizes(t: torch.Tensor, splits: Sequence[int], size: int, what: str) -> list[int]:
    """The rows (dim 0 slices) of `t` going to (or coming from) each rank: `splits`, or equal ones when empty."""
    rows = t.shape[0] if t.dim() else 1
    if not splits:
        if rows % size:
            raise ValueError(
                f"pycomm backend: all_to_all_single without {what}_split_sizes needs the {what}'s "
                f"first dimension divisible by the group size {size}, got {rows}"
            )
        return [rows // size] * size
    splits = [int(s) for s in splits]
    if len(splits) != size or any(s < 0 for s in splits) or sum(splits) != rows:
        raise ValueError(
            f"pycomm backend: all_to_all_single's {what}_split_sizes must be {size} non-negative sizes "
            f"summing to the {what}'s first dimension {rows}, got {splits}"
        )
    return splits


def exchange(
    comm: Communicator, inp: torch.Tensor, sends: Sequence[int], out_numel: int, receives: Sequence[int], row: int
) -> tuple[object, Callable[[], list[torch.Tensor]]]:
    """Starts the all-to-all of flat `inp` (sends[j] rows of `row` elements to rank j; receives[i] rows from
    rank i, out_numel elements in all): (pycomm's Work, a function giving the received chunks once it is done)."""
    n = comm.size
    longest = torch.tensor([max([*sends, *receives, 0])], dtype=torch.int64)
    comm.allreduce(longest, ReduceOp.MAX)  # the same padded chunk on every rank
    chunk = int(longest.item()) * row
    if all(s * row == chunk for s in sends):
        padded_in = inp.reshape(-1)
    else:
        padded_in = inp.new_zeros(n * chunk)
        for j, part in enumerate(inp.reshape(-1).split([s * row for s in sends])):
            padded_in[j * chunk : j * chunk + part.numel()] = part
    padded_out = inp.new_empty(n * chunk)
    work = comm.alltoall(padded_out, padded_in, async_op=True)
    assert sum(receives) * row == out_numel, (receives, row, out_numel)

    def received() -> list[torch.Tensor]:
        return [padded_out[i * chunk : i * chunk + r * row] for i, r in enumerate(receives)]

    return work, received


def row_numel(output: torch.Tensor, input: torch.Tensor) -> int:
    """Elements per first-dimension row, the same in output and input (torch's all_to_all_single)."""
    rows = [math.prod(t.shape[1:]) if t.dim() else 1 for t in (output, input)]
    if rows[0] != rows[1]:
        raise ValueError(
            f"pycomm backend: all_to_all_single's output and input rows differ: output "
            f"{tuple(output.shape)}, input {tuple(input.shape)} (all but the first dimension must match)"
        )
    return rows[0]
