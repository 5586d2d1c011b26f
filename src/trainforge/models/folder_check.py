"""Checks of a Hugging Face base model folder, before its weights are loaded or data is read.

Owns `check_model_folder`: the folder exists and is a folder; `config.json` is readable JSON
naming a `model_type` that transformers knows as a causal LM; the weights are there (one
`model.safetensors`, the shards a `model.safetensors.index.json` lists, or a
`pytorch_model.bin`, which transformers reads with `torch.load(weights_only=True)`) and every
safetensors file is whole; the tokenizer has files to load from. Each problem is one
`UserError` line naming the file. Loading the tokenizer itself is checked where it is loaded
(`trainforge.models.hf.load_tokenizer`), since that is the same work.

Whole-file safetensors checks go through `safetensors.safe_open`, which reads the header and
verifies that the file covers every tensor it declares (a truncated download fails there);
reading every tensor would double the start-up time of a large model for no extra safety.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainforge.errors import UserError

SAFETENSORS_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")


def _init_fix(path: Path) -> str:
    return (
        "put a save_pretrained folder there, or create one with "
        f"`trainforge models init {path.name} --arch gpt2 --size tiny --corpus FILE`"
    )


def read_json_file(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from `path`, or one line naming the file (and the line of a syntax error)."""
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder, not a file", "replace it with the file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise UserError(f"{what} {path} cannot be read ({reason})", "restore the file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(
            f"{what} {path}:{err.lineno}: invalid JSON ({err.msg})", "restore the file"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} holds a {type(data).__name__}, not a JSON object")
    return data


def _check_architecture(config_file: Path, config: dict[str, Any]) -> None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = config.get("model_type")
    if not model_type:
        raise UserError(
            f"{config_file} names no model_type", "restore the config.json of the model"
        )
    if model_type not in CONFIG_MAPPING_NAMES:
        raise UserError(
            f"{config_file}: model_type {model_type!r} is an architecture this transformers "
            "version does not know",
            "upgrade transformers, or use a model of a known architecture (custom code is "
            "never run: trust_remote_code stays off)",
        )
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise UserError(
            f"{config_file}: model_type {model_type!r} is not a causal language model",
            "fine-tune a decoder model (gpt2, llama, qwen2, ...)",
        )


def _weight_files(path: Path) -> list[Path]:
    index_file = path / SAFETENSORS_INDEX
    if index_file.exists():
        index = read_json_file(index_file, "weight index")
        shards = sorted(set((index.get("weight_map") or {}).values()))
        if not shards:
            raise UserError(f"weight index {index_file} lists no shard files", "restore it")
        return [path / name for name in shards]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).exists():
            return [path / name]
    raise UserError(
        f"no model weights in {path} (model.safetensors, {SAFETENSORS_INDEX} or pytorch_model.bin)",
        "copy the whole save_pretrained folder, weights included",
    )


def _check_weights(path: Path) -> None:
    from safetensors import SafetensorError, safe_open

    for file in _weight_files(path):
        if not file.is_file():
            raise UserError(f"weight file {file} is missing", "copy the whole model folder again")
        if file.suffix != ".safetensors":
            continue
        try:
            with safe_open(str(file), framework="pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as err:
            reason = " ".join(str(err).split())
            raise UserError(
                f"weight file {file} is truncated or corrupt ({file.stat().st_size} bytes; "
                f"{reason})",
                "copy or download the model again",
            ) from None


def _check_tokenizer_files(path: Path) -> None:
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(
            f"no tokenizer in {path} (none of {', '.join(TOKENIZER_FILES)})",
            "save the tokenizer with the model (tokenizer.save_pretrained(folder))",
        )
    if (path / "tokenizer.json").is_file():
        read_json_file(path / "tokenizer.json", "tokenizer file")
    if (path / "tokenizer_config.json").exists():
        read_json_file(path / "tokenizer_config.json", "tokenizer config")


def check_model_folder(path: Path, field: str = "model.model_name_or_path") -> Path:
    """`path` when it holds a loadable causal LM; one `UserError` line otherwise."""
    config_file = check_folder_shape(path, field)
    _check_architecture(config_file, read_json_file(config_file, "model config"))
    _check_weights(path)
    _check_tokenizer_files(path)
    return path


def check_folder_shape(path: Path, field: str = "model.model_name_or_path") -> Path:
    """The folder's config.json, when `path` is a folder that has one; one `UserError` line
    otherwise. Reads no file and imports nothing heavy, so `trainforge validate` and the
    train command's first checks (`run.preflight`) say it before torch loads."""
    if not path.exists():
        raise UserError(
            f"{field} = {str(path)!r}: not a Hugging Face model folder (no such folder)",
            _init_fix(path),
        )
    if not path.is_dir():
        raise UserError(f"{field} = {str(path)!r} is a file, not a model folder", _init_fix(path))
    config_file = path / "config.json"
    if not config_file.exists():
        raise UserError(
            f"{field} = {str(path)!r}: not a Hugging Face model folder (no config.json in it)",
            _init_fix(path),
        )
    return config_file
