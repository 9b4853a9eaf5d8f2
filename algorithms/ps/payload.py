"""Model tensors as one flat fp32 vector on the wire, and gradient pushes through a codec.

Parameters always travel in fp32 (they are the model); a gradient push may be int8-compressed
(pycomm.Int8Codec: one fp32 scale per block of 256) with an error-feedback residual kept by the
pushing worker, so what one push loses is sent with the next."""

from __future__ import annotations

from typing import Any

import torch

from algorithms.ps.wire import WireError


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One fp32 vector of all tensors (a copy)."""
    if not tensors:
        return torch.empty(0)
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copy the vector back into the tensors (each in its own dtype and device)."""
    total = sum(t.numel() for t in tensors)
    if flat.numel() != total:
        raise WireError(f"received {flat.numel()} values for {total} model elements")
    offset = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()


def gradients(params: list[torch.Tensor]) -> torch.Tensor:
    """The parameters' gradients as one fp32 vector (zeros where a parameter has none)."""
    return (
        torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).float().cpu() for p in params]
        )
        if params
        else torch.empty(0)
    )


def encode(
    vector: torch.Tensor, codec: Any, residual: torch.Tensor | None
) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """(header fields, tensors) of a vector for the wire, compressed by `codec` when given."""
    if codec is None:
        return {"codec": None}, [vector]
    enc = codec.encode(vector, residual=residual)
    return {"codec": type(codec).__name__, "numel": enc.numel}, [enc.data, enc.scales]


def decode(header: dict[str, Any], tensors: list[torch.Tensor], codec: Any) -> torch.Tensor:
    """The fp32 vector a push carries; the receiver's codec must be the one named in the header."""
    name = header.get("codec")
    if name is None:
        if len(tensors) != 1:
            raise WireError(f"an uncompressed push carries one tensor, got {len(tensors)}")
        return tensors[0].float()
    if codec is None or type(codec).__name__ != name:
        raise WireError(
            f"push compressed with {name}, this side uses {type(codec).__name__ if codec else 'no codec'}: "
            "start every rank with the same codec option"
        )
    enc = codec.empty(int(header["numel"]))
    enc.data.copy_(tensors[0].reshape(enc.data.shape))
    enc.scales.copy_(tensors[1].reshape(enc.scales.shape))
    out = torch.empty(int(header["numel"]))
    codec.decode(enc, out)
    return out
