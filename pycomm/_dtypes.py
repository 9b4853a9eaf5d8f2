"""torch dtype <-> the integer codes of csrc/common/dtype.h (the Python/C++ contract)."""

from __future__ import annotations

import torch

CODES: dict[torch.dtype, int] = {
    torch.float32: 0,
    torch.float64: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.int8: 4,
    torch.uint8: 5,
    torch.int32: 6,
    torch.int64: 7,
}
DTYPES: dict[int, torch.dtype] = {code: dtype for dtype, code in CODES.items()}  # code -> dtype
FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def code(dtype: torch.dtype, what: str) -> int:
    """The C++ code of `dtype`; raises TypeError naming `what` if pycomm cannot handle it."""
    try:
        return CODES[dtype]
    except KeyError:
        names = ", ".join(str(d).replace("torch.", "") for d in CODES)
        raise TypeError(f"{what}: dtype {dtype} is not supported; expected one of {names}") from None
