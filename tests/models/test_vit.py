"""ViT shapes, configurable sizes, SDPA attention and gradient checkpointing equivalence."""

from __future__ import annotations

import torch

from trainforge.models.vit import VisionTransformer


def make(**kw):
    args = dict(
        image_size=8,
        channels=1,
        num_classes=10,
        patch_size=2,
        embedding_dim=32,
        num_layers=2,
        num_heads=4,
        mlp_size=64,
        attention_dropout=0.0,
        mlp_dropout=0.0,
    )
    args.update(kw)
    return VisionTransformer(**args)


def test_shapes_and_token_count():
    model = make()
    assert model.pos_embed.shape == (1, 16 + 1, 32)  # 16 patches + class token
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    big = make(image_size=32, channels=3, patch_size=4, embedding_dim=48, num_heads=6)
    assert big(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_gradient_checkpointing_gives_same_gradients():
    torch.manual_seed(0)
    model = make()
    x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 10, (4,))

    def grads():
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        return [p.grad.clone() for p in model.parameters()]

    plain = grads()
    model.set_gradient_checkpointing(True)
    checkpointed = grads()
    for a, b in zip(plain, checkpointed, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_attention_dropout_only_in_training():
    torch.manual_seed(0)
    model = make(attention_dropout=0.5, mlp_dropout=0.5)
    x = torch.randn(3, 1, 8, 8)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    assert not torch.equal(model(x), model(x))
