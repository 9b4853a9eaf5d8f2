"""How a batch becomes a loss, per task: classification, language modelling, masked autoencoding."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Result:
    loss: torch.Tensor  # mean loss over the batch (the one to backpropagate)
    correct: int  # correct predictions (0 where accuracy has no meaning)
    count: int  # predictions made (samples, or tokens for the LM)


def classify(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> Result:
    x, y = batch
    logits = model(x)
    return Result(F.cross_entropy(logits, y), int((logits.argmax(1) == y).sum()), y.numel())


def lm(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> Result:
    x, y = batch
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    return Result(loss, int((logits.argmax(-1) == y).sum()), y.numel())


def mae(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> Result:
    return Result(model(pixel_values=batch[0]).loss, 0, batch[0].shape[0])


TASKS = {"classify": classify, "lm": lm, "mae": mae}
