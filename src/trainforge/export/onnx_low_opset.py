"""ONNX opsets below 14 (the training-optimisation notes export with opset 11), for older
TensorRT parsers.

torch's dynamo exporter writes opset 18 and newer (asked for less, it keeps 18), so a lower
opset goes through the TorchScript-based exporter (`dynamo=False`). That exporter knows
`scaled_dot_product_attention` from opset 14 only; below it, this module registers, for the
length of one export, a symbolic that writes the same attention in opset-11 operators:
MatMul(q, kᵀ) x scale, Softmax over the last axis (opset 11's Softmax flattens to 2-D at
`axis`, which for the last axis is the same), MatMul with v. Masks and causal attention are
refused (the ViT needs neither); the export's own check against PyTorch on the validation
samples catches anything else. Written by hand because torch registers its symbolic for
opset 14 only; `torch.onnx.register_custom_op_symbolic` is torch's documented way to add one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from trainforge.errors import UserError

LOWEST_OPSET = 11  # the notes' opset; LayerNorm and GELU decompose into opset-11 operators
SDPA_OPSET = 14  # torch's TorchScript exporter has scaled_dot_product_attention from here
ATTENTION = "aten::scaled_dot_product_attention"
_FLOAT = 1  # onnx.TensorProto.FLOAT


def _is_none(value: torch._C.Value) -> bool:
    return value.node().mustBeNone()


def _constant_false(value: torch._C.Value) -> bool:
    node = value.node()
    if node.kind() == "onnx::Constant" and node.hasAttribute("value"):
        return not bool(node.t("value").item())
    return node.kind() == "prim::Constant" and not node.output().toIValue()


def _attention(g, query, key, value, attn_mask=None, dropout_p=None, is_causal=None, *rest):
    """softmax(q kᵀ * scale) v in opset-11 operators (eval mode: no dropout)."""
    if attn_mask is not None and not _is_none(attn_mask):
        raise UserError(
            "ONNX opset below 14: attention with a mask has no opset-11 form here",
            f"use --opset {SDPA_OPSET} or higher",
        )
    if is_causal is not None and not _constant_false(is_causal):
        raise UserError(
            "ONNX opset below 14: causal attention has no opset-11 form here",
            f"use --opset {SDPA_OPSET} or higher",
        )
    scale = rest[0] if rest else None
    if scale is not None and not _is_none(scale):
        raise UserError(
            "ONNX opset below 14: attention with an explicit scale has no opset-11 form here",
            f"use --opset {SDPA_OPSET} or higher",
        )
    rank = query.type().dim() if query.type().kind() == "TensorType" else None
    if rank is None:
        raise UserError(
            "ONNX opset below 14: the attention's input rank is not known when tracing",
            f"use --opset {SDPA_OPSET} or higher",
        )
    perm = [*range(rank - 2), rank - 1, rank - 2]
    scores = g.op("MatMul", query, g.op("Transpose", key, perm_i=perm))
    # scale = 1 / sqrt(head size), the head size read from q's shape at run time
    last = g.op("Constant", value_t=torch.tensor([rank - 1], dtype=torch.int64))
    head = g.op("Gather", g.op("Shape", query), last, axis_i=0)
    root = g.op("Sqrt", g.op("Cast", head, to_i=_FLOAT))
    weights = g.op("Softmax", g.op("Div", scores, root), axis_i=rank - 1)
    return g.op("MatMul", weights, value)


@contextlib.contextmanager
def attention_symbolic(opset: int) -> Iterator[None]:
    """While exporting at `opset` below 14, scaled_dot_product_attention has a symbolic."""
    if opset >= SDPA_OPSET:
        yield
        return
    torch.onnx.register_custom_op_symbolic(ATTENTION, _attention, opset)
    try:
        yield
    finally:
        torch.onnx.unregister_custom_op_symbolic(ATTENTION, opset)


def exporter_for(opset: int, exporter: str) -> str:
    """The exporter a run uses: `auto` is dynamo from opset 18 and the TorchScript-based one
    below (asked for less, dynamo writes opset 18 anyway)."""
    if exporter == "auto":
        return "dynamo" if opset >= 18 else "torchscript"
    return exporter
