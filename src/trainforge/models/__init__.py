"""Model builders: turn the `model` config section into an `nn.Module`."""

from __future__ import annotations

from trainforge.config.schema import ModelConfig
from trainforge.models.vit import VisionTransformer

__all__ = ["VisionTransformer", "build_vit"]


def build_vit(
    cfg: ModelConfig, *, image_size: int, channels: int, num_classes: int
) -> VisionTransformer:
    return VisionTransformer(
        image_size=image_size,
        channels=channels,
        num_classes=num_classes,
        patch_size=cfg.patch_size,
        embedding_dim=cfg.embedding_dim,
        num_layers=cfg.num_layers,
        num_heads=cfg.num_heads,
        mlp_size=cfg.mlp_size,
        attention_dropout=cfg.attention_dropout,
        mlp_dropout=cfg.mlp_dropout,
    )
