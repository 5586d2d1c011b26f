"""Artifact folders: writing one atomically, and loading one back as a predictor.

An artifact is a folder under `RUN/export/` holding the model file(s), `summary.json` (format,
runtime, size, accuracy, latency, input spec, model facts) and, for PyTorch artifacts, the
run's `config.yaml`, from which the model is rebuilt. It is written under a hidden name and
renamed into place when complete, so a failed export leaves the previous artifact intact.
Runtimes: `torch` (fp32 safetensors), `torch-int8` (dynamic INT8 Linear layers, see
`int8.py`) and `onnxruntime` (any ONNX model, fp32 or QDQ INT8), each loaded by the predictor
loader its format registers (`export.formats`); `transformers` folders (merged causal LMs)
load with transformers itself.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import torch
import yaml

from trainforge.errors import UserError
from trainforge.runfolder import SUMMARY, RunFolder, summary_file
from trainforge.storage import ACCESS_ERRNOS, SPACE_ERRNOS, storage_error

CONFIG = "config.yaml"
DISK_ERRNOS = SPACE_ERRNOS | ACCESS_ERRNOS
EXPORT_HINT = "pass an artifact folder written by `trainforge export` (e.g. runs/NAME/export/onnx)"


def require(module: str):
    """Import an optional export dependency, or say which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(
            f"{module} is not installed",
            "install the export extra: pip install 'trainforge[export]'",
        ) from None


class ArtifactDir:
    """`with ArtifactDir(root, name) as folder:` write files into `folder`; renamed when done."""

    def __init__(self, root: Path, name: str) -> None:
        self.final = root / name
        self.tmp = root / f".tmp-{name}-{os.getpid()}"

    def __enter__(self) -> Path:
        try:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp.mkdir()
        except OSError as err:
            raise _write_error(self.final, err, None) from None
        return self.tmp

    def __exit__(
        self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            written = _bytes_in(self.tmp)
            shutil.rmtree(self.tmp, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:  # one line, no traceback
                raise _write_error(self.final, exc, written) from None
            return
        old = self.final.parent / f".old-{self.final.name}-{os.getpid()}"
        try:
            if self.final.exists():
                self.final.rename(old)
            self.tmp.rename(self.final)
        except OSError as err:
            if old.exists() and not self.final.exists():
                old.rename(self.final)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise _write_error(self.final, err, None) from None
        shutil.rmtree(old, ignore_errors=True)


def _bytes_in(folder: Path) -> int | None:
    """Bytes written into `folder` before a write failed (at least what it needs)."""
    try:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) or None
    except OSError:
        return None


def _write_error(final: Path, err: OSError, written: int | None) -> UserError:
    return storage_error(
        "export", final, err, written, "the run, its checkpoints and earlier exports are intact"
    )


def write_summary(folder: Path, summary: dict[str, Any]) -> None:
    summary_file(folder).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def folder_size(folder: Path, names: list[str]) -> int:
    return sum((folder / name).stat().st_size for name in names)


class TorchPredictor:
    """Calls a PyTorch module on host float32 arrays; returns host float32 arrays."""

    def __init__(self, model: torch.nn.Module, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.model = model.eval().to(self.device)

    def __call__(self, inputs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = self.model(torch.from_numpy(inputs).to(self.device))
            return out.float().cpu().numpy()


class OrtPredictor:
    """Calls an onnxruntime session on host float32 arrays."""

    def __init__(self, path: Path, device: str = "cpu", threads: int | None = None) -> None:
        ort = require("onnxruntime")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        providers = ["CPUExecutionProvider"]
        if device == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise UserError(
                    "onnxruntime here has no CUDA execution provider",
                    "install onnxruntime-gpu, or benchmark with --device cpu",
                )
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(str(path), options, providers=providers)
        self.input_name = self.session.get_inputs()[0].name

    def __call__(self, inputs: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input_name: inputs})[0]


@dataclass
class Artifact:
    """An artifact folder read back: its summary, and predictors built on request."""

    folder: Path
    summary: dict[str, Any]

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def runtime(self) -> str:
        return str(self.summary["runtime"])

    @property
    def model_file(self) -> Path:
        return self.folder / self.summary["artifact"]

    def example_input(self, batch_size: int, seed: int = 0) -> np.ndarray:
        from trainforge.export.kinds import kind_class

        cls = kind_class(self.summary["task"], source=str(self.folder))
        return cls.example_input(self.summary["model"], batch_size, seed).numpy()

    def predictor(self, device: str = "cpu", threads: int | None = None):
        """The artifact as a predictor, loaded by its runtime's registered loader."""
        from trainforge.export.formats import predictor_loader

        load = predictor_loader(self.runtime)
        if load is None:
            raise UserError(
                f"{self.folder}: {self.runtime} artifacts have no predictor here",
                "load it with its own library (see load_with in its summary.json)",
            )
        return load(self, device, threads)

    def fresh_model(self) -> torch.nn.Module:
        """The artifact's model as its config and summary build it, without weights."""
        from trainforge.config.schema import RunConfig
        from trainforge.export.kinds import kind_class

        config = RunConfig.model_validate(yaml.safe_load((self.folder / CONFIG).read_text()))
        cls = kind_class(self.summary["task"], source=str(self.folder))
        return cls.build_model(config, self.summary["model"])

    def torch_model(self) -> torch.nn.Module:
        """The fp32 PyTorch model with the artifact's safetensors weights."""
        from safetensors.torch import load_file

        model = self.fresh_model()
        model.load_state_dict(load_file(str(self.model_file)))
        return model.eval()


def ort_predictor(artifact: Artifact, device: str, threads: int | None) -> OrtPredictor:
    """Runtime `onnxruntime`: any ONNX model, fp32 or QDQ INT8."""
    return OrtPredictor(artifact.model_file, device, threads)


def torch_predictor(artifact: Artifact, device: str, threads: int | None) -> TorchPredictor:
    """Runtime `torch`: fp32 safetensors (`torch-int8` is `export.int8.int8_predictor`)."""
    return TorchPredictor(artifact.torch_model(), device)


def _read_summary(folder: Path) -> dict[str, Any] | None:
    """The artifact summary in `folder`, or None (a run's training summary.json is not one)."""
    path = summary_file(folder)
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not valid JSON: {err.msg}", EXPORT_HINT) from None
    is_artifact = isinstance(summary, dict) and {"runtime", "artifact", "task"} <= summary.keys()
    return summary if is_artifact else None


def load_artifact(path: Path) -> Artifact:
    """Read an artifact folder (or a model file inside one)."""
    if not path.exists():
        raise UserError(f"artifact {path} not found", EXPORT_HINT)
    folder = path if path.is_dir() else path.parent
    summary = _read_summary(folder)
    if summary is None:
        raise UserError(f"{path} is not an export artifact (no artifact {SUMMARY})", EXPORT_HINT)
    return Artifact(folder, summary)


def find_artifacts(path: Path) -> list[Artifact]:
    """Artifacts at `path`: one artifact, an export folder, or a run folder with `export/`."""
    if not path.exists():
        raise UserError(f"artifact {path} not found", EXPORT_HINT)
    if path.is_file() or _read_summary(path) is not None:
        return [load_artifact(path)]
    exports = RunFolder(path).export_dir
    root = exports if exports.is_dir() else path
    found = [
        load_artifact(child)
        for child in sorted(root.iterdir())
        if child.is_dir() and not child.name.startswith(".") and _read_summary(child) is not None
    ]
    if not found:
        raise UserError(f"no export artifacts under {path}", EXPORT_HINT)
    return found
