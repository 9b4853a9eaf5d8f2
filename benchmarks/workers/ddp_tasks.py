"""The models the torch.distributed backend benchmarks train (benchmarks/ddp_backend.py, ddp_hooks_link.py):
the tiny MNIST CNN and a small char GPT on the embedded tiny Shakespeare, each as a Task giving a freshly
seeded model, this rank's index batches and the loss of one batch, so a worker trains either the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from apps.data.text import load
from apps.models.gpt import GPT
from benchmarks.mnist_cnn import TinyCNN, shard_batches, split

MODELS = ("mnist", "gpt")
# a small char GPT (0.8M parameters, a 3.2 MB gradient): a benchmark's steps take seconds, not minutes, on a
# shared 2-core machine, while its gradient is still 10x the CNN's (communication weighs more)
GPT_CONFIG = {"n_layer": 4, "n_head": 4, "n_embd": 128, "dropout": 0.0}
GPT_BLOCK = 64
DEFAULT_BATCH = {"mnist": 32, "gpt": 8}  # samples (images, 64-character windows) per rank and step


@dataclass
class Task:
    name: str
    make_model: Callable[[], torch.nn.Module]  # the same initial parameters on every call and rank
    loss: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]  # the loss of one batch of indices
    n_train: int  # training samples; batches index them

    def batches(self, rank: int, size: int, batch: int, steps: int) -> list[torch.Tensor]:
        """This rank's first `steps` batches (epochs after the first as needed), the same for every backend."""
        order: list[torch.Tensor] = []
        epoch = 0
        while len(order) < steps:
            more = shard_batches(self.n_train, rank, size, batch, epoch)
            if not more:
                raise ValueError(f"{self.name}: {self.n_train} samples make no batch of {batch} on {size} ranks")
            order += more
            epoch += 1
        return order[:steps]


def _seeded(make: Callable[[], torch.nn.Module]) -> Callable[[], torch.nn.Module]:
    def seeded() -> torch.nn.Module:
        torch.manual_seed(0)
        return make()

    return seeded


def task(name: str) -> Task:
    """The Task of model `name` (one of MODELS)."""
    if name == "mnist":
        (x, y), _ = split()
        return Task(name, _seeded(TinyCNN), lambda m, idx: F.cross_entropy(m(x[idx]), y[idx]), len(y))
    if name == "gpt":
        splits = load(block_size=GPT_BLOCK)
        train, vocab = splits.train, splits.info["vocab_size"]

        def gpt_loss(m: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
            x, y = train.batch(idx)
            return F.cross_entropy(m(x).flatten(0, 1), y.flatten())

        return Task(name, _seeded(lambda: GPT(vocab, block_size=GPT_BLOCK, **GPT_CONFIG)), gpt_loss, len(train))
    raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
