"""Vision Transformer (ViT) as in the ViT/CIFAR-10 guide: pure model math only.

Patch embedding (a strided convolution), a class token, learned position embeddings,
pre-norm transformer blocks whose attention uses `scaled_dot_product_attention` (fused
kernels where the device has them), attention and MLP dropout, and a linear head.
Device placement, precision and compilation are applied elsewhere (engine/).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

if TYPE_CHECKING:
    from trainforge.config.schema import ModelConfig


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        assert dim % num_heads == 0, "validated in config.checks"
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.num_heads, d // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        drop = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_size: int, attn_drop: float, mlp_drop: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads, attn_drop)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_size),
            nn.GELU(),
            nn.Dropout(mlp_drop),
            nn.Linear(mlp_size, dim),
            nn.Dropout(mlp_drop),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    # The classifier: the one module whose shape follows the number of classes, so a run
    # that starts from another run's weights re-initialises it (`model.init_from`) and
    # `model.freeze=backbone` trains it alone.
    classifier_name = "head"

    def __init__(
        self,
        *,
        image_size: int,
        channels: int,
        num_classes: int,
        patch_size: int,
        embedding_dim: int,
        num_layers: int,
        num_heads: int,
        mlp_size: int,
        attention_dropout: float = 0.1,
        mlp_dropout: float = 0.1,
    ) -> None:
        super().__init__()
        assert image_size % patch_size == 0, "validated in config.checks"
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(channels, embedding_dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embedding_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embedding_dim))
        self.pos_drop = nn.Dropout(mlp_dropout)
        self.blocks = nn.ModuleList(
            Block(embedding_dim, num_heads, mlp_size, attention_dropout, mlp_dropout)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(embedding_dim)
        self.head = nn.Linear(embedding_dim, num_classes)
        self.gradient_checkpointing = False
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def set_gradient_checkpointing(self, enabled: bool) -> None:
        """Recompute each block's activations in backward to trade compute for memory."""
        self.gradient_checkpointing = enabled

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.pos_drop(torch.cat([cls, x], dim=1) + self.pos_embed)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.norm(x[:, 0]))


def build_vit(
    cfg: ModelConfig, *, image_size: int, channels: int, num_classes: int
) -> VisionTransformer:
    """The ViT the `model` config section describes, for images of this shape and classes."""
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
