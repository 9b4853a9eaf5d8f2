"""The ViT-MAE of maxie's training script, through Hugging Face transformers (optional dependency)."""

from __future__ import annotations

from typing import Any, Mapping

from torch import nn


def vit_mae(hf_config: Mapping[str, Any] | None = None) -> nn.Module:
    try:
        from transformers import ViTMAEConfig, ViTMAEForPreTraining
    except ImportError as e:
        raise ImportError(
            "model 'vit_mae' needs Hugging Face transformers: pip install transformers "
            "(or pick another model, e.g. --override model.name=vit)"
        ) from e
    return ViTMAEForPreTraining(ViTMAEConfig(**dict(hf_config or {})))
