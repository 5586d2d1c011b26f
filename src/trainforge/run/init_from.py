"""Start a run from another run's weights (`model.init_from`) and train part of it
(`model.freeze`).

Owns where the weights come from, how they load into the model this config builds, which
parameters train, and what run.json records about the source. Sources:
- a run folder or a checkpoint folder: the weights `run.weights.run_weights` says it means
  (final model, else verified best, else newest checkpoint; the answer evaluate and export
  use too), stated in its words; a checkpoint is verified against its manifest;
- a run of a task kind whose model is a base-model folder (`TaskEntry.base_model`, the
  causal-LM task): its Hugging Face `model/` or LoRA `adapter/`;
- an exported safetensors artifact (`trainforge export --format safetensors`), or any
  `.safetensors` file;
- causal-lm: a Hugging Face model folder (the base model: `models.hf.init_from_folders`) or a
  LoRA adapter folder, whose adapter this run goes on training.

On load, tensors of matching name and shape load; the classifier head (the model's
`classifier_name`) of another shape keeps its fresh initialisation, said in one line; any
other difference is refused in one line naming the first tensor and both shapes, before the
run folder exists. The Trainer builds its optimizer afterwards, over the parameters that
still require gradients, so the optimizer state starts fresh and a frozen backbone is not in
it. A resumed run does not load the source again: its checkpoint holds the weights.

Weights are read with safetensors only, so loading never runs code from a file. timm's
`load_pretrained` (which also drops a classifier of another size) was considered: it reads
timm's pretrained-model registry and URLs, not run folders or checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainforge.config import RunConfig
from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.registry import TASKS
from trainforge.run import weights
from trainforge.run.weights import weights_line
from trainforge.runfolder import guide_spelling, summary_file

HOW = (
    "pass a run folder (runs/NAME), a checkpoint folder, an exported safetensors folder or "
    "a .safetensors file"
)
WEIGHTS = ckpt.WEIGHTS  # the weights file of a checkpoint or an exported artifact


@dataclass(frozen=True)
class InitSource:
    given: str  # model.init_from as the user wrote it
    kind: str  # final model, best checkpoint, checkpoint, exported model, weights file, ...
    path: Path  # the safetensors file (vit) or the adapter folder (causal-lm)
    config_hash: str | None  # the source run's config hash, where it recorded one

    def record(self) -> dict[str, Any]:
        """What run.json keeps about the source."""
        return {
            "source": self.given,
            "kind": self.kind,
            "path": str(self.path),
            "config_hash": self.config_hash,
        }

    def line(self) -> str:
        chosen = weights_line(self.kind, self.path)
        return f"init_from {self.given}: {chosen}; the optimizer starts fresh"


def locate(config: RunConfig) -> InitSource | None:
    """The weights `model.init_from` names, checked before any data loads; None when unset
    or when the source is a causal-lm base model (the task loads that itself)."""
    value = config.model.init_from
    if not value:
        return None
    path = guide_spelling(Path(value).expanduser())  # the ViT guide's checkpoints/NAME.pth
    if not path.exists():
        raise UserError(f"model.init_from {value}: not found", HOW)
    if TASKS.get(config.task.kind).base_model:
        return _locate_lm(value, config.lora.enabled)
    try:
        found = weights.run_weights(path)
    except UserError as err:
        raise UserError(f"model.init_from {value}: {err.message}", err.fix) from None
    if found is None:
        return _exported(value, path)
    if found.kind == weights.FILE:
        if path.suffix != ".safetensors":
            raise UserError(f"model.init_from {value}: not a .safetensors file", HOW)
        return InitSource(value, found.kind, path, _file_hash(path))
    if found.checkpoint:
        return _checkpoint(value, found.folder, found.kind)
    return InitSource(value, found.kind, found.file, _file_hash(found.file))


def _checkpoint(value: str, folder: Path, kind: str) -> InitSource:
    problem = ckpt.verify(folder)
    if problem:
        raise UserError(f"model.init_from {value}: checkpoint {folder}: {problem}", HOW)
    # an FSDP run's checkpoint keeps its weights as shards in dcp/, read whole here
    path = ckpt.weights_path(folder)
    return InitSource(value, kind, path, ckpt.read_meta(folder).get("config_hash"))


def _exported(value: str, folder: Path) -> InitSource:
    weights = folder / WEIGHTS
    summary = _read_json(summary_file(folder))
    if not weights.is_file():
        raise UserError(f"model.init_from {value}: no {WEIGHTS} in this folder", HOW)
    if summary.get("format", "safetensors") != "safetensors":
        raise UserError(
            f"model.init_from {value}: a {summary['format']} export, not fp32 weights",
            "pass the run's safetensors export (export/safetensors) or the run folder",
        )
    return InitSource(value, "exported model", weights, summary.get("config_hash"))


def _locate_lm(value: str, lora: bool) -> InitSource | None:
    from trainforge.models import hf

    model_dir, adapter_dir = hf.init_from_folders(value, lora)
    if model_dir is not None:
        return None  # the base model: causal_lm.resolve_base_model loads it
    if adapter_dir is None or not lora:
        raise UserError(
            f"model.init_from {value}: no Hugging Face model or LoRA adapter there",
            "pass a causal-lm run folder, its model/ folder, or a LoRA adapter folder "
            "(with lora.enabled=true)",
        )
    summary = _read_json(adapter_dir / hf.SUMMARY_FILE)
    return InitSource(value, "LoRA adapter", adapter_dir, summary.get("config_hash"))


def _file_hash(path: Path) -> str | None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            return (fh.metadata() or {}).get("config_hash")
    except Exception as err:  # safetensors raises its own error types for a damaged header
        raise UserError(f"model.init_from {path}: cannot read it: {err}", HOW) from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ------------------------------------------------------------------ loading and freezing
def frozen_builder(build_task: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`build_task` whose model is frozen as `model.freeze` says, so the batch-fit probe
    measures the memory of the parameters the run really trains."""

    def build(config: RunConfig, device: Any = None) -> Any:
        task = build_task(config, device)
        if config.model.freeze == "backbone":
            freeze_backbone(task.model)
        return task

    return build


def prepare(model: Any, config: RunConfig, source: InitSource | None) -> list[str]:
    """Load `source` into `model` (None: nothing to load, e.g. on --resume) after
    `frozen_builder` froze it; returns the lines the run prints about both."""
    lines = []
    if source is not None and source.kind == "LoRA adapter":
        from trainforge.models import hf

        hf.load_adapter_weights(model, source.path, f"model.init_from {source.given}")
        lines.append(source.line())
    elif source is not None:
        lines.extend(load_weights(model, source))
    if config.model.freeze == "backbone":
        lines.append(frozen_line(model))
    return lines


def load_weights(model: Any, source: InitSource) -> list[str]:
    """Load matching tensors; a head of another shape stays re-initialised."""
    saved = ckpt.read_weights(source.path)
    current = model.state_dict()
    head = getattr(model, "classifier_name", None)

    def refit(key: str) -> bool:  # a head tensor the source lacks or has in another shape
        in_head = head is not None and key.startswith(f"{head}.")
        return in_head and (key not in saved or _shape(saved[key]) != _shape(current[key]))

    fresh = [k for k in current if refit(k)]
    _refuse_mismatch(source, saved, current, skip=set(fresh))
    model.load_state_dict({k: v for k, v in saved.items() if k not in fresh}, strict=False)
    lines = [source.line()]
    if fresh:
        weight = f"{head}.weight"
        before = _shape(saved[weight])[0] if weight in saved else "no"
        after = _shape(current[weight])[0]
        lines.append(f"init_from {source.given}: head {before} -> {after} classes, re-initialised")
    return lines


def _refuse_mismatch(source: InitSource, saved: dict, current: dict, skip: set[str]) -> None:
    where = f"model.init_from {source.given}"
    fix = "use the model settings of the run it comes from, or start without init_from"
    for key, tensor in current.items():
        if key in skip:
            continue
        if key not in saved:
            raise UserError(f"{where}: it has no {key} {_shape(tensor)}, this model has", fix)
        if _shape(saved[key]) != _shape(tensor):
            raise UserError(
                f"{where}: {key} is {_shape(saved[key])} there, {_shape(tensor)} here", fix
            )
    extra = [k for k in saved if k not in current]
    if extra:
        raise UserError(f"{where}: {extra[0]} {_shape(saved[extra[0]])} is not in this model", fix)


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(tensor.shape)


def freeze_backbone(model: Any) -> None:
    """Only the classifier head keeps requires_grad, so the optimizer gets only it."""
    head = model.classifier_name
    for name, param in model.named_parameters():
        param.requires_grad_(name.startswith(f"{head}."))


def frozen_line(model: Any) -> str:
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"model.freeze=backbone: training the head only ({trained:,} of {total:,} parameters)"
