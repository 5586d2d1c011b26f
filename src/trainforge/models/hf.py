"""Hugging Face causal language models from local folders: load, adapt (LoRA), save, list.

Everything is read offline (`local_files_only=True`, never `trust_remote_code`): a base model
is a `save_pretrained` folder under `models/` (or any path). LoRA goes through `peft`.
Output models are written to a hidden temporary folder and renamed into place, so a failed
save never leaves half a model under `models/`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.runfolder import RunFolder

SUMMARY_FILE = "trainforge.json"
ADAPTER_FILE = "adapter_model.safetensors"  # peft's save_pretrained name


def require_llm_extra() -> None:
    try:
        import peft  # noqa: F401
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        raise UserError(
            f"Hugging Face models need the llm extra ({err.name} is missing)",
            "pip install 'trainforge[llm]'",
        ) from None


def resolve_model_dir(name_or_path: str, models_dir: str | Path = "models") -> Path:
    """`models/NAME`, `NAME` (looked up in models_dir) or any folder path -> the folder."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() or len(path.parts) > 1:
        return path
    return Path(models_dir) / name_or_path


def check_model_dir(path: Path, field: str = "model.model_name_or_path") -> Path:
    """The folder, checked as a base model (`trainforge.models.folder_check`)."""
    from trainforge.models.folder_check import check_model_folder

    return check_model_folder(path, field)


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as err:  # tokenizers raises bare Exception for a damaged tokenizer.json
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"cannot load the tokenizer in {path}: {reason}",
            "the folder needs tokenizer.json or the model's tokenizer files",
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: Path, *, gradient_checkpointing: bool = False) -> Any:
    """fp32 weights (mixed precision is the loop's autocast), no KV cache while training."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), local_files_only=True, dtype=torch.float32
        )
    except (OSError, ValueError, RuntimeError, KeyError) as err:  # e.g. weights vs config
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"cannot load the model in {path}: {reason[:300]}",
            "the folder needs config.json and safetensors weights of a causal LM",
        ) from None
    model.config.use_cache = False
    if gradient_checkpointing:
        enable_checkpointing(model)
    return model


def enable_checkpointing(model: Any) -> None:
    """Activation (gradient) checkpointing on a trainforge ViT or a Hugging Face model.

    Non-reentrant checkpointing also works when only LoRA adapters need gradients.
    transformers 5 renamed `gradient_checkpointing_enable` to
    `activation_checkpointing_enable` (the old name warns); both are supported."""
    if hasattr(model, "set_gradient_checkpointing"):
        model.set_gradient_checkpointing(True)
        return
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def apply_lora(model: Any, cfg: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules) if cfg.target_modules else None,
        task_type="CAUSAL_LM",
        # GPT-2's layers are transformers' Conv1D, which stores weights transposed; peft
        # would warn and flip the flag itself
        fan_in_fan_out=any(type(m).__name__ == "Conv1D" for m in model.modules()),
    )
    try:
        return get_peft_model(model, lora)
    except ValueError as err:
        names = sorted({n.rsplit(".", 1)[-1] for n, _ in model.named_modules() if n})
        raise UserError(
            f"lora.target_modules = {cfg.target_modules}: {str(err).splitlines()[0]}",
            f"pick module names of this model, e.g. among {names[:12]}",
        ) from None


def init_from_folders(value: str, lora: bool) -> tuple[Path | None, Path | None]:
    """(base model folder, LoRA adapter folder) that `model.init_from` names for a causal LM:
    a model folder, an adapter folder, or a causal-lm run folder with `model/` and/or
    `adapter/` (its adapter when this run trains LoRA, else its model)."""
    path = Path(value).expanduser()
    if (path / "adapter_config.json").is_file():
        return None, path
    if (path / "config.json").is_file():
        return path, None
    run = RunFolder(path)  # what a causal-lm run saves
    model, adapter = run.hf_model, run.hf_adapter
    has_adapter = (adapter / "adapter_config.json").is_file()
    if lora and has_adapter:
        return None, adapter
    if (model / "config.json").is_file():
        return model, None
    return None, adapter if has_adapter else None


def load_adapter_weights(model: Any, folder: Path, where: str) -> None:
    """Go on training the LoRA adapter saved in `folder`: its tensors into `model`'s adapter,
    refused in one line when this run's LoRA settings give other shapes."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = load_file(str(folder / ADAPTER_FILE))
    current = get_peft_model_state_dict(model)
    fix = "use the lora settings (r, target_modules) the adapter was trained with"
    for key, tensor in current.items():
        if key not in saved:
            raise UserError(f"{where}: the adapter has no {key}", fix)
        if tuple(saved[key].shape) != tuple(tensor.shape):
            shapes = f"{tuple(saved[key].shape)} there, {tuple(tensor.shape)} here"
            raise UserError(f"{where}: {key} is {shapes}", fix)
    set_peft_model_state_dict(model, saved)


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def count_parameters(model: Any) -> tuple[int, int]:
    """(trainable, total) parameters, tied weights counted once."""
    params = {id(p): p for p in model.parameters()}.values()
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


# ------------------------------------------------------------------ output folders
def check_output_name(name: str) -> str:
    if not name.strip() or ".." in name or "/" in name or "\\" in name or name.startswith("."):
        raise UserError(
            f"output name {name!r} is not a plain folder name",
            "use letters, digits, '-', '_' and '.', e.g. jetson-tuned (no '/', '\\\\' or '..')",
        )
    return name


def output_dir(
    models_dir: str | Path, name: str, overwrite: bool, name_flag: str = "--output-name"
) -> Path:
    """models_dir/name after checking the name, refusing to replace a model unless asked."""
    path = Path(models_dir) / check_output_name(name)
    if path.exists() and not overwrite:
        raise UserError(
            f"model folder {path} already exists",
            f"pick another {name_flag}, or replace it with --overwrite",
        )
    return path


@contextmanager
def staged_folder(dest: Path) -> Iterator[Path]:
    """Write into a hidden sibling folder; on success it replaces `dest` in one rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{dest.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = dest.parent / f".old-{dest.name}-{os.getpid()}"
    if dest.exists():
        dest.rename(old)
    tmp.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def save_model_folder(model: Any, tokenizer: Any, folder: Path, summary: dict[str, Any]) -> None:
    """save_pretrained (safetensors) + tokenizer + trainforge.json, written atomically."""
    with staged_folder(folder) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")


def copy_model_folder(source: Path, dest: Path) -> None:
    with staged_folder(dest) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)


# ------------------------------------------------------------------------- listing
@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: Path
    kind: str  # "model" or "lora adapter"
    arch: str
    num_parameters: int
    size_bytes: int
    base_model: str | None


def list_models(models_dir: str | Path) -> list[ModelInfo]:
    root = Path(models_dir)
    if not root.is_dir():
        return []
    return [info for folder in sorted(root.iterdir()) if (info := describe_model(folder))]


def describe_model(folder: Path) -> ModelInfo | None:
    if folder.name.startswith(".") or not folder.is_dir():
        return None
    summary = _read_json(folder / SUMMARY_FILE) or {}
    if (folder / "adapter_config.json").is_file():
        adapter = _read_json(folder / "adapter_config.json") or {}
        base = adapter.get("base_model_name_or_path")
        arch = f"lora r={adapter.get('r')}"
        kind = "lora adapter"
    elif (folder / "config.json").is_file():
        config = _read_json(folder / "config.json") or {}
        archs = config.get("architectures") or [config.get("model_type", "?")]
        arch, kind, base = str(archs[0]), "model", summary.get("base_model")
    else:
        return None
    return ModelInfo(
        name=folder.name,
        path=folder,
        kind=kind,
        arch=arch,
        num_parameters=_count_safetensors(folder),
        size_bytes=sum(p.stat().st_size for p in _files(folder)),
        base_model=base,
    )


def _files(folder: Path) -> Iterator[Path]:
    return (p for p in folder.rglob("*") if p.is_file())


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _count_safetensors(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files, read from headers only."""
    from safetensors import safe_open

    total = 0
    for path in folder.glob("*.safetensors"):
        try:
            with safe_open(str(path), framework="pt") as fh:
                for key in fh.keys():  # noqa: SIM118  (safe_open has no __iter__)
                    n = 1
                    for dim in fh.get_slice(key).get_shape():
                        n *= dim
                    total += n
        except Exception:  # a foreign or damaged file: list the folder without a count
            return 0
    return total


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.1f} GiB"
