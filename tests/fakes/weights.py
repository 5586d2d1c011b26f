"""Comparing two runs' final weights where only float rounding may differ (another device,
split or kernel order).

The attention key bias is left out: its true gradient is zero (softmax ignores a per-query
constant), so what it receives is rounding noise that AdamW scales up to steps of the
learning rate. Everything else is compared as one vector, by its relative difference.
"""

from __future__ import annotations

import torch


def without_key_bias(key: str, tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.flatten().double()
    if not key.endswith("attn.qkv.bias"):
        return flat
    dim = flat.numel() // 3
    return torch.cat([flat[:dim], flat[2 * dim :]])  # the query and value thirds


def relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """|a - b| / |a| over every weight but the attention key bias."""
    assert a.keys() == b.keys()
    x = torch.cat([without_key_bias(k, a[k]) for k in sorted(a)])
    y = torch.cat([without_key_bias(k, b[k]) for k in sorted(b)])
    return float((x - y).norm() / x.norm())
