"""The problems benchmarks/nodes.py trains, each defined once for both sides of the race: apps.train's options
that make its run this problem (pycomm's cases), and the model, data, optimizer and loss that the peers' own
loop (benchmarks/workers/nodes_loop.py: torch DDP/FSDP2, torchft, pycomm's bare DiLoCo) builds from it.

- mnist-cnn: apps.train's embedded default: SmallCNN on the embedded MNIST, batch 32 per rank, SGD lr 0.05
  momentum 0.9, cosine over the run's steps.
- gpt-char: a small character GPT (2 layers, 4 heads, 128 wide, context 64, no dropout) on the embedded tiny
  Shakespeare, batch 32 windows per rank, AdamW lr 1e-3 betas (0.9, 0.99) without weight decay or clipping,
  cosine over the run's steps: gpt_shakespeare_char.yaml made small enough for 4 CPU ranks on 2 cores."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

BATCH = 32  # per rank, both problems


@dataclass(frozen=True)
class Problem:
    name: str
    title: str  # for tables and plots
    apps_options: tuple[str, ...]  # apps.train's arguments (besides the run's length and the method)
    model: Callable[[], torch.nn.Module]  # built after torch.manual_seed(seed) on every rank, as apps.train does
    splits: Callable[[], Any]  # apps.data's Splits: .train and .eval, each with len() and .batch(indices)
    optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer]  # the inner optimizer of the peers' loop
    # torchft's DiLoCo fragments: three parts of the model whose parameters cover it, synced in this order
    fragments: Callable[[Any], list[torch.nn.Module]]


def mean_loss(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy over every target: a class per image (CNN) or a character per position (GPT)."""
    return F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction=reduction)


def _cnn() -> torch.nn.Module:
    from apps.models import SmallCNN

    return SmallCNN()


def _mnist() -> Any:
    from apps.data import idx

    return idx.load()


GPT_SHAPE = {"n_layer": 2, "n_head": 4, "n_embd": 128, "dropout": 0.0}
GPT_BLOCK = 64


def _gpt() -> torch.nn.Module:
    from apps.models.gpt import GPT

    return GPT(vocab_size=_shakespeare().info["vocab_size"], block_size=GPT_BLOCK, **GPT_SHAPE)


@functools.cache
def _shakespeare() -> Any:
    from apps.data import text

    return text.load(block_size=GPT_BLOCK)


def _gpt_fragments(m: Any) -> list[torch.nn.Module]:
    # the embeddings (the head is tied to the token embedding), the first block, the second block and the norm
    return [torch.nn.ModuleList([m.tok, m.pos]), m.blocks[0], torch.nn.ModuleList([m.blocks[1], m.norm])]


def _flow(value: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"


PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in [
        Problem(
            "mnist-cnn",
            "MNIST CNN",
            (),  # apps.train's embedded default
            _cnn,
            _mnist,
            lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
            lambda m: [m.features[0], m.features[3], m.classifier],
        ),
        Problem(
            "gpt-char",
            "char GPT 2x128",
            (
                "--config",
                "apps/configs/gpt_shakespeare_char.yaml",
                "-o",
                f"model.options={_flow(GPT_SHAPE)}",
                "-o",
                f"data.options={{block_size: {GPT_BLOCK}}}",
                "-o",
                f"data.batch_size={BATCH}",
                "-o",
                "optim.weight_decay=0",
                "-o",
                "train.grad_clip=null",
                "-o",
                "schedule.warmup_steps=0",
                "-o",
                "schedule.min_lr=0",
                "-o",
                "schedule.total_steps=null",
            ),
            _gpt,
            _shakespeare,
            lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0),
            _gpt_fragments,
        ),
    ]
}
