"""The Models page's view of models/: Hugging Face folders with size, architecture and the
trainforge.json summary a training run writes beside the weights.

`trainforge.models.hf.list_models` gives the same listing for the CLI, but it counts
parameters through safetensors' torch binding and lives in a package that imports torch;
in the server that would cost seconds and hundreds of MiB beside a run (one shared memory
on a Jetson). So this reads the folders directly: config.json, adapter_config.json,
trainforge.json, and the JSON header of each safetensors file (8-byte length, then JSON).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from trainforge.web.settings import is_plain_name

SUMMARY_FILE = "trainforge.json"
_HEADER_LIMIT = 64 * 1024 * 1024


def list_model_names(models_dir: Path) -> list[str]:
    if not models_dir.is_dir():
        return []
    return sorted(p.name for p in models_dir.iterdir() if _is_model(p))


def _is_model(folder: Path) -> bool:
    # A symlink out of the models folder is not offered: the web app's path rule (web/paths.py).
    return (
        is_plain_name(folder.name)
        and folder.is_dir()
        and folder.resolve().is_relative_to(folder.parent.resolve())
        and ((folder / "config.json").is_file() or (folder / "adapter_config.json").is_file())
    )


def list_models(models_dir: Path) -> list[dict[str, Any]]:
    if not models_dir.is_dir():
        return []
    return [describe(p) for p in sorted(models_dir.iterdir()) if _is_model(p)]


def describe(folder: Path) -> dict[str, Any]:
    summary = _read_json(folder / SUMMARY_FILE)
    if (folder / "adapter_config.json").is_file():
        adapter = _read_json(folder / "adapter_config.json") or {}
        kind, arch = "lora adapter", f"lora r={adapter.get('r')}"
        base = adapter.get("base_model_name_or_path")
    else:
        config = _read_json(folder / "config.json") or {}
        archs = config.get("architectures") or [config.get("model_type") or "?"]
        kind, arch = "model", str(archs[0])
        base = (summary or {}).get("base_model")
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {
        "name": folder.name,
        "kind": kind,
        "architecture": arch,
        "base_model": base,
        "num_parameters": sum(_tensor_elements(p) for p in folder.glob("*.safetensors")),
        "size_bytes": sum(p.stat().st_size for p in files),
        "modified": max((p.stat().st_mtime for p in files), default=folder.stat().st_mtime),
        "summary": _short_summary(summary),
    }


def _short_summary(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the Models page shows of trainforge.json: for a trained model its task, base,
    data, steps and metrics; for one `trainforge models init` made, how (size, seed,
    corpus, vocabulary)."""
    if not summary:
        return None
    keep = ("task", "created_at", "base_model", "global_step", "config_hash")
    keep += ("created_by", "size", "seed", "vocab_size")  # trainforge models init
    out: dict[str, Any] = {k: summary[k] for k in keep if k in summary}
    dataset = summary.get("dataset")
    if isinstance(dataset, dict) and dataset.get("train_file"):
        out["train_file"] = dataset["train_file"]
    corpus = summary.get("corpus")
    if isinstance(corpus, list) and corpus:
        out["corpus"] = ", ".join(str(p) for p in corpus)
    metrics = summary.get("metrics")
    if isinstance(metrics, dict):
        out["metrics"] = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
    return out


def _tensor_elements(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > _HEADER_LIMIT:
                return 0
            header = json.loads(fh.read(length))
    except (OSError, ValueError, struct.error):
        return 0
    total = 0
    for name, entry in header.items():
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        count = 1
        for dim in entry.get("shape") or []:
            count *= int(dim)
        total += count
    return total


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
