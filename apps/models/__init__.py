"""Reference models by name. Each entry records its task (how a batch becomes a loss)."""

from __future__ import annotations

import functools

from torch import nn

from apps.models.gpt import GPT
from apps.models.resnet import CifarResNet, ResNet
from apps.models.small import MLP, SmallCNN
from apps.models.vit import ViT
from apps.models.vit_mae import vit_mae
from apps.name_registry import Registry
from apps.option_rules import all_of, divides, fraction, whole

MODELS: Registry[nn.Module] = Registry("model")
MODELS.add("mlp", MLP, task="classify")
MODELS.add("cnn", SmallCNN, task="classify")
MODELS.add("resnet20", CifarResNet, task="classify")
MODELS.add("resnet50", ResNet, task="classify")
MODELS.add("resnet152", functools.partial(ResNet, depth=152), task="classify")
MODELS.add(
    "vit",
    ViT,
    task="classify",
    check=all_of(
        whole("image_size", "patch_size", "in_channels", "num_classes", "dim", "heads"),
        whole("depth", minimum=0),
        divides("heads", "dim"),
        fraction("dropout"),
    ),
)
MODELS.add(
    "gpt",
    GPT,
    task="lm",
    check=all_of(
        whole("vocab_size", "block_size", "n_head", "n_embd"),
        whole("n_layer", minimum=0),  # no block: a bigram model
        divides("n_head", "n_embd"),
        fraction("dropout"),
    ),
)
MODELS.add("vit_mae", vit_mae, task="mae")

__all__ = ["MODELS", "MLP", "SmallCNN", "CifarResNet", "ResNet", "ViT", "GPT", "vit_mae"]
