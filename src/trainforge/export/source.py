"""What `trainforge export` reads: a run folder or one checkpoint, checked before any work.

Which weights a run folder or checkpoint folder means is `run.weights.run_weights`'s answer
(the one evaluate and `model.init_from` use too: final model, else verified best, else newest),
said in its one line. A checkpoint folder is verified against its manifest
(`engine.checkpoint.verify`) and only its safetensors weights are read, so loading never runs
code from a file. The task kind is checked against the kinds that export supports before the
config is validated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml
from pydantic import ValidationError
from safetensors import SafetensorError

from trainforge.config.schema import RunConfig, TaskConfig
from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.export.options import SOURCE_HINT as HOW
from trainforge.export.options import check_source_exists
from trainforge.export.plugins import load_plugins, run_of
from trainforge.runfolder import RunFolder, guide_spelling

if TYPE_CHECKING:
    from trainforge.run.weights import RunWeights


@dataclass
class Source:
    """Weights and config of the model to export."""

    given: Path  # what the user passed
    run_dir: Path  # where `export/` goes by default
    weights: Path  # the safetensors file read
    config: RunConfig
    config_yaml: str
    state_dict: dict[str, torch.Tensor]

    @property
    def label(self) -> str:
        return str(self.weights)


def resolve_source(path: Path) -> Source:
    """Find, verify and read the weights and config behind `path` (a run folder or a
    checkpoint folder: `run.weights.run_weights` chooses)."""
    from trainforge.run import weights

    path = guide_spelling(path)  # the ViT guide's checkpoints/best_model.pth
    check_source_exists(path)
    if not path.is_dir():
        raise UserError(f"{path} is a file, not a run folder or checkpoint", HOW)
    found = weights.run_weights(path)
    if found is None:
        raise UserError(f"{path} is neither a run folder nor a checkpoint", HOW)
    return read_source(found)


def read_source(found: RunWeights) -> Source:
    """Verify and read the chosen weights with the config they were trained with; prints
    the choice in `RunWeights.line`'s words."""
    print(found.line())
    if found.checkpoint:
        return _from_checkpoint(found.folder, found.run_dir or run_of(found.folder))
    return _read(found.given, found.folder, found.file, RunFolder(found.folder).resolved_config)


def load_weights(
    model: torch.nn.Module, state: dict[str, torch.Tensor], label: Path
) -> torch.nn.Module:
    """`model` with `state` loaded, in evaluation mode; one line when they do not fit. Tied
    weights (GPT-2's lm_head and embeddings) may be saved once: an alias counts as loaded."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    current = model.state_dict()
    loaded = {current[k].data_ptr() for k in state if k in current}
    missing = [k for k in missing if current[k].data_ptr() not in loaded]
    if unexpected or missing:
        names = (unexpected or missing)[:3]
        raise UserError(
            f"weights {label} do not fit the model of its config "
            f"({len(missing)} missing, {len(unexpected)} unexpected, e.g. {names})",
            "use a checkpoint together with the config and base model it was trained with",
        )
    return model.eval()


def _from_checkpoint(folder: Path, run_dir: Path) -> Source:
    problem = ckpt.verify(folder)
    if problem:
        raise UserError(f"checkpoint {folder} is not usable: {problem}", "pick another checkpoint")
    ckpt.check_format(folder, ckpt.read_meta(folder))
    return _read(folder, run_dir, ckpt.weights_path(folder), ckpt.config_file(folder))


def _read(given: Path, run_dir: Path, weights: Path, config_file: Path) -> Source:
    text = config_file.read_text(encoding="utf-8") if config_file.is_file() else ""
    raw = _parse(text, config_file)
    default = TaskConfig.model_fields["kind"].default  # a config that names no task
    kind = (raw.get("task") or {}).get("kind", default)
    from trainforge.export.kinds import kind_class

    kind_class(str(kind), source=str(given))  # a wrong task fails before the config check
    load_plugins(raw, run_dir)
    try:
        config = RunConfig.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(
            f"{config_file}: {where}: {first['msg']}",
            "export a run made by this version of trainforge",
        ) from None
    try:
        state = ckpt.read_weights(weights)
    except (OSError, SafetensorError) as err:
        raise UserError(
            f"cannot read weights {weights}: {err}", "pick another checkpoint"
        ) from None
    return Source(given, run_dir, weights, config, text, state)


def _parse(text: str, config_file: Path) -> dict[str, Any]:
    if not text:
        raise UserError(f"{config_file} is missing or empty", "pass a complete run or checkpoint")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise UserError(f"{config_file}: invalid YAML: {err}".splitlines()[0], HOW) from None
    if not isinstance(raw, dict):
        raise UserError(f"{config_file} is not a run config", HOW)
    return raw
