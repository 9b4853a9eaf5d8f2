"""Every reference model: forward shapes, registry errors, the optional ViT-MAE."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from apps.models import MODELS


@pytest.mark.parametrize(
    "name, options, x, out",
    [
        ("mlp", {}, torch.randn(3, 1, 28, 28), (3, 10)),
        ("cnn", {}, torch.randn(3, 1, 28, 28), (3, 10)),
        ("resnet20", {}, torch.randn(2, 3, 32, 32), (2, 10)),
        ("resnet50", {"num_classes": 7}, torch.randn(1, 3, 64, 64), (1, 7)),
        ("vit", {"depth": 2}, torch.randn(2, 3, 32, 32), (2, 10)),
        ("gpt", {"n_layer": 2, "block_size": 16}, torch.randint(0, 65, (2, 16)), (2, 16, 65)),
    ],
)
def test_forward_shapes(name: str, options: dict, x: torch.Tensor, out: tuple) -> None:
    model = MODELS.build(name, options).eval()
    with torch.no_grad():
        assert tuple(model(x).shape) == out


def test_reference_sizes() -> None:
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(MODELS.build("resnet50", {})) == 25_557_032  # as torchvision's ResNet-50
    assert 0.26e6 < count(MODELS.build("resnet20", {})) < 0.28e6  # He et al.: 0.27M
    assert 10.6e6 < count(MODELS.build("gpt", {})) < 10.8e6  # nanoGPT shakespeare_char: ~10.65M


def test_data_sizes_fill_unset_model_options() -> None:
    model = MODELS.build("gpt", {"n_layer": 1}, {"vocab_size": 11, "block_size": 8, "image_size": 5})
    assert model.tok.num_embeddings == 11 and model.block_size == 8


def test_bad_names_and_options() -> None:
    with pytest.raises(ValueError, match="did you mean 'resnet20'"):
        MODELS.get("resnet21")
    with pytest.raises(ValueError, match="depth must be 6n"):
        MODELS.build("resnet20", {"depth": 21})
    with pytest.raises(ValueError, match="sequence length"):
        MODELS.build("gpt", {"n_layer": 1, "block_size": 4})(torch.zeros(1, 5, dtype=torch.long))


def test_vit_mae_needs_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        with pytest.raises(ImportError, match="pip install transformers"):
            MODELS.build("vit_mae", {})
    else:
        cfg = {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "image_size": 32,
            "patch_size": 8,
            "num_channels": 1,
        }
        out = MODELS.build("vit_mae", {"hf_config": cfg})(pixel_values=torch.randn(2, 1, 32, 32))
        assert out.loss.ndim == 0
