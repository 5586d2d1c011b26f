"""A finished run's artefacts on its page: the final model to download, and Export.

Download: an image run's `model.safetensors` as is; a causal-lm run's Hugging Face folder
(the run's `model/`, else its output model under models/) as one zip archive, written to a
temporary file in a worker thread and removed once sent.

Export runs `trainforge export RUN -f FORMAT ...` as a subprocess, as the app runs training:
the export loads torch and onnxruntime and takes seconds to minutes, which must not happen in
the server's process or block its event loop. One export per run at a time; its output goes
to a log under the app's data folder (an export still running when the server stops ends
with it: `stop_exports`), and what it wrote is read back from the artifacts'
`summary.json` files under the run's export folder (size, metric, batch-1 latency and, for
ONNX, the `trtexec` lines that build TensorRT engines).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask

from trainforge.runfolder import RunFolder, summary_file
from trainforge.web.app_state import AppState
from trainforge.web.db import RunRecord
from trainforge.web.lookup import run_record
from trainforge.web.run_files import log_tail, read_summary

router = APIRouter(prefix="/api")
FORMATS = ("onnx", "int8", "pruned")
# Enough timed calls for a stable median on a small model, few enough to answer in seconds.
LATENCY_RUNS = 20
_LOCK = threading.Lock()
# Seconds an export has to end on SIGTERM when the server stops, before it is killed.
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class _Export:
    process: subprocess.Popen
    log: Path


_EXPORTS: dict[Path, _Export] = {}  # by run folder: one export per run at a time


def stop_exports() -> None:
    """At server stop: an export still running ends with the server, and its log says so.
    It is seconds to minutes of work that the run's page starts again, and left running it
    would write artifacts that no page follows (the next server knows nothing of it)."""
    with _LOCK:
        running = [e for e in _EXPORTS.values() if e.process.poll() is None]
    for export in running:
        export.process.terminate()
    for export in running:
        try:
            export.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            export.process.kill()
            export.process.wait()
        with export.log.open("a") as out:
            out.write("export stopped: the server stopped; start it again from the run's page\n")


class ExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    formats: list[Literal["onnx", "int8", "pruned"]] = Field(min_length=1, max_length=3)


def _state(request: Request) -> AppState:
    return request.app.state.trainforge


def model_source(state: AppState, record: RunRecord) -> Path | None:
    """The run's final model: a file, or a Hugging Face folder; None before it is written."""
    folder = state.settings.run_folder(record.id)
    if record.status != "completed":
        return None
    runs = state.settings.runs_path.resolve()
    for path in (folder.model, folder.hf_model):
        if path.exists() and path.resolve().is_relative_to(runs):  # the path rule
            return path
    if record.output_model:
        path = state.settings.models_path / record.output_model
        if (path / "config.json").is_file():
            return path
    return None


def _zip(folder: Path) -> Path:
    handle, name = tempfile.mkstemp(suffix=".zip", prefix="trainforge-model-")
    os.close(handle)
    with zipfile.ZipFile(name, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(folder.rglob("*")):
            # A link could name a file outside the model folder: not sent.
            if path.is_file() and not path.is_symlink():
                archive.write(path, Path(folder.name) / path.relative_to(folder))
    return Path(name)


@router.get("/runs/{run_id}/model", response_class=FileResponse, responses={404: {}})
def download_model(request: Request, run_id: str) -> FileResponse:
    """The run's final model: model.safetensors, or a zip of its Hugging Face folder."""
    state = _state(request)
    record = run_record(state, run_id)
    source = model_source(state, record)
    if source is None:
        raise HTTPException(404, f"run {record.id} has no final model (it did not complete)")
    if source.is_file():
        return FileResponse(source, filename=f"{record.id}.safetensors")
    archive = _zip(source)
    return FileResponse(
        archive, filename=f"{record.id}-model.zip", background=BackgroundTask(archive.unlink)
    )


def _log(state: AppState, run_id: str) -> Path:
    return state.settings.logs_path / f"{run_id}.export.log"


def artifacts(folder: RunFolder) -> list[dict[str, Any]]:
    """What the run's export folder holds: one entry per artifact with its summary's facts."""
    found = []
    root = folder.export_dir
    if not root.is_dir():
        return []
    for artifact in sorted(p for p in root.iterdir() if p.is_dir()):
        summary = read_summary(RunFolder(artifact)) if summary_file(artifact).is_file() else None
        if not summary:
            continue
        metric = summary.get("metric")
        latency = summary.get("latency_batch1") or {}
        found.append(
            {
                "format": artifact.name,
                "file": str(Path(folder.path.name) / artifact.name / str(summary.get("artifact"))),
                "size_bytes": summary.get("size_bytes"),
                "size_ratio": summary.get("size_ratio"),
                "metric": metric,
                "value": (summary.get("metrics") or {}).get(metric),
                "delta": (summary.get("metric_delta") or {}).get(metric),
                "latency_p50_ms": latency.get("p50_ms"),
                "runtime": summary.get("runtime"),
                "tensorrt": summary.get("tensorrt") or {},
            }
        )
    return found


def _status(state: AppState, record: RunRecord) -> dict[str, Any]:
    with _LOCK:
        export = _EXPORTS.get(state.settings.run_folder(record.id).path)
    process = export.process if export is not None else None
    running = process is not None and process.poll() is None
    code = None if process is None or running else process.returncode
    return {
        "running": running,
        "exit_code": code,
        "log": log_tail(_log(state, record.id), 30),
        "artifacts": artifacts(state.settings.run_folder(record.id)),
        "model": model_source(state, record) is not None,
    }


@router.get("/runs/{run_id}/export", responses={400: {}, 404: {}})
def export_status(request: Request, run_id: str) -> dict[str, Any]:
    """The run's export: running or not, its output, and the artifacts written so far."""
    state = _state(request)
    return _status(state, run_record(state, run_id))


@router.post("/runs/{run_id}/export", status_code=202, responses={400: {}, 404: {}, 409: {}})
def start_export(request: Request, run_id: str, body: ExportRequest) -> dict[str, Any]:
    """Start `trainforge export runs/NAME -f FORMAT ...` in a subprocess."""
    state = _state(request)
    record = run_record(state, run_id)
    if model_source(state, record) is None:
        raise HTTPException(409, f"run {record.id} has no final model to export yet")
    folder = state.settings.cli_run_folder(record.id)
    command = [sys.executable, "-m", "trainforge", "export", str(folder.path)]
    for fmt in dict.fromkeys(body.formats):
        command += ["-f", fmt]
    command += ["--latency-runs", str(LATENCY_RUNS)]
    key = state.settings.run_folder(record.id).path
    with _LOCK:
        export = _EXPORTS.get(key)
        if export is not None and export.process.poll() is None:
            raise HTTPException(409, f"an export of run {record.id} is running; wait for it")
        log = _log(state, record.id)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            out.write(f"$ trainforge export {' '.join(command[4:])}\n")
            out.flush()
            process = subprocess.Popen(
                command, cwd=state.settings.root, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
            _EXPORTS[key] = _Export(process, log)
    return _status(state, record)
