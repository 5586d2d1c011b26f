"""The optimizer registry: `optimizer.name` in the run config picks how parameters are updated.

This module owns the one place an optimizer is built. The trainer and the batch-fit probe
(`batch_probe.StepRunner`) both call `build_optimizer`, so the probe measures the memory of
exactly the parameter groups and optimizer state the run will have. It owns:

- the parameter groups: weight decay on matrices (2-D and up), none on biases, norms,
  the class token and position embeddings (`param_groups`);
- the built-in entries of `trainforge.registry.OPTIMIZERS` (config name -> builder):
  "adamw" (AdamW as in the ViT guide, the fused kernel where it applies) and "sgd" (with
  `optimizer.momentum`). A project or a test registers its own with
  `@OPTIMIZERS.register("name")`;
- each builder's own arguments: an `Options` model set as the builder's `options`
  attribute (`@with_args(Model)`), fed from `optimizer.args` and checked with the config;
- a dotted class path as the name (`torch.optim.RMSprop`, or any importable subclass of
  `torch.optim.Optimizer`), built with the learning rate, the same groups and
  `optimizer.args` as keyword arguments (checked against its signature when it is built).

Libraries considered: litgpt names the optimizer by its class path (`torch.optim.AdamW`
plus init args), which the class-path form here follows; timm's `create_optimizer_v2`
has a large name table and its own decay groups, but it brings timm's whole optimizer zoo
and its own parameter-group rules, where the trainer's groups must stay exactly as they are
(resumed runs replay bit-identically). So the registry is a dict and a decorator.

Importing this module does not import torch (the config schema reads the names to check
`optimizer.name` and to document it, and config validation runs before torch loads).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field

from trainforge.errors import UserError
from trainforge.options import Options
from trainforge.registry import CLASS_PATH, OPTIMIZERS

if TYPE_CHECKING:
    import torch
    from torch import nn

    from trainforge.config.schema import OptimizerConfig

ParamGroups = list[dict[str, Any]]
# builder(groups, config, device, sharded) -> optimizer; `sharded`: FSDP (DTensor) parameters.
Builder = Callable[
    ["ParamGroups", "OptimizerConfig", "torch.device", bool], "torch.optim.Optimizer"
]


def with_args(model: type[Options]) -> Callable[[Builder], Builder]:
    """Decorator: `model` is the builder's options (what `optimizer.args` takes)."""

    def attach(builder: Builder) -> Builder:
        builder.options = model  # type: ignore[attr-defined]
        return builder

    return attach


class AdamWArgs(Options):
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW β1.")
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0, description="AdamW β2.")
    adam_epsilon: float = Field(1e-8, gt=0.0, description="AdamW ε.")
    fused: bool | None = Field(
        None,
        description="AdamW's fused kernel (None: on for CUDA and CPU, off for FSDP-sharded "
        "parameters; false: torch's per-tensor loop).",
    )


class SGDArgs(Options):
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="SGD momentum.")


def param_groups(model: nn.Module, weight_decay: float) -> ParamGroups:
    """Decay on matrices; none on biases, norms, class token and positions (1-D or embeddings)."""
    decay = [
        p
        for n, p in model.named_parameters()
        if p.requires_grad and p.ndim >= 2 and "pos_embed" not in n and "cls_token" not in n
    ]
    ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module, config: OptimizerConfig, device: torch.device, *, sharded: bool = False
) -> torch.optim.Optimizer:
    """The optimizer `config.name` names, over `model`'s trainable parameters in two groups."""
    groups = param_groups(model, config.weight_decay)
    builder = OPTIMIZERS.find(config.name)
    if builder is None:
        builder = _class_builder(config.name)
    return builder(groups, config, device, sharded)


@OPTIMIZERS.register("adamw")
@with_args(AdamWArgs)
def _adamw(
    groups: ParamGroups, o: OptimizerConfig, device: torch.device, sharded: bool
) -> torch.optim.Optimizer:
    """AdamW as in the ViT guide (fused kernel where it applies)."""
    import torch

    # AdamW's fused kernel: one pass over each tensor instead of a dozen (1.27x the
    # samples/s of the per-tensor loop for a tiny MLP on CPU, `make bench`); sharded
    # (DTensor) parameters keep torch's default implementation.
    args: AdamWArgs = o.args
    fused = args.fused
    if fused is None:
        fused = device.type in ("cuda", "cpu") and not sharded
    return torch.optim.AdamW(
        groups,
        lr=o.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        fused=fused or None,
    )


@OPTIMIZERS.register("sgd")
@with_args(SGDArgs)
def _sgd(
    groups: ParamGroups, o: OptimizerConfig, device: torch.device, sharded: bool
) -> torch.optim.Optimizer:
    """SGD with momentum (optimizer.momentum)."""
    import torch

    return torch.optim.SGD(groups, lr=o.learning_rate, momentum=o.args.momentum)


def _class_builder(path: str) -> Builder:
    import torch

    module_name, _, attr = path.rpartition(".")
    fix = f"Use one of {', '.join(OPTIMIZERS.names())} or a class path such as torch.optim.RMSprop."
    if not module_name or not CLASS_PATH.match(path):
        raise UserError(f"optimizer.name = {path!r}: unknown optimizer", fix)
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise UserError(f"optimizer.name = {path!r}: cannot import it ({e})", fix) from None
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise UserError(f"optimizer.name = {path!r}: not a torch.optim.Optimizer subclass", fix)

    def build(
        groups: ParamGroups, o: OptimizerConfig, device: torch.device, sharded: bool
    ) -> torch.optim.Optimizer:
        args = dict(o.args)
        _check_class_args(path, cls, args)
        return cls(groups, **{"lr": o.learning_rate, **args})

    return build


def _check_class_args(path: str, cls: type, args: dict[str, Any]) -> None:
    """Every key of `optimizer.args` is a keyword of `cls`; else one line with the nearest."""
    import difflib
    import inspect

    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = [
        n
        for n, p in params.items()
        if n not in ("params", "lr") and p.kind.name != "VAR_POSITIONAL"
    ]
    for key in args:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"its arguments: {', '.join(known)}"
        raise UserError(f"optimizer.args.{key}: {path} takes no argument {key!r}", hint)
