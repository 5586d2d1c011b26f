"""Source resolution, option checks, task-kind plug-in, latency statistics, the bench table."""

from __future__ import annotations

import shutil
import time
from typing import ClassVar

import numpy as np
import pytest

from trainforge.errors import UserError
from trainforge.export import ExportOptions, export, find_artifacts
from trainforge.export import job as job_module
from trainforge.export.bench import BenchRow, render
from trainforge.export.measure import Latency, measure_latency
from trainforge.export.options import check_formats, check_options
from trainforge.export.source import resolve_source
from trainforge.export.vision import ImageClassificationExport


def test_run_folder_without_final_model_falls_back_to_best_checkpoint(digits_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(digits_run, run, ignore=shutil.ignore_patterns("export"))
    (run / "model.safetensors").unlink()
    source = resolve_source(run)
    assert source.weights == run / "checkpoints" / "best_model" / "model.safetensors"
    assert source.run_dir == run
    assert source.config.task.kind == "image-classification"


def test_checkpoint_source_exports_next_to_its_run(digits_run):
    source = resolve_source(digits_run / "checkpoints" / "best_model")
    assert source.run_dir == digits_run


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "not found"),
        (lambda p: (p / "f.txt").write_text("x") and p / "f.txt", "is a file"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "neither a run folder nor a checkpoint"),
    ],
)
def test_bad_sources(tmp_path, make, message):
    with pytest.raises(UserError, match=message):
        resolve_source(make(tmp_path))


def test_run_without_weights_is_an_error(digits_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(digits_run / "config.resolved.yaml", run)
    with pytest.raises(UserError, match=r"no model\.safetensors and no usable checkpoint"):
        resolve_source(run)


def test_format_list():
    assert check_formats(["all"]) == ["onnx", "int8", "pruned", "safetensors"]
    assert check_formats(["int8,onnx", "onnx"]) == ["int8", "onnx"]
    with pytest.raises(UserError, match="no export format"):
        check_formats([])
    with pytest.raises(UserError, match="unknown export format 'tensorrt'"):
        check_formats(["onnx,tensorrt"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ExportOptions(exporter="tflite"), "not an ONNX exporter"),
        (ExportOptions(opset=9), "out of range"),
        (ExportOptions(sparsity=1.0), "between 0 and 1"),
        (ExportOptions(finetune_epochs=-1), "negative"),
        (ExportOptions(calibration_batches=0), "at least 1"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(UserError, match=message):
        check_options(options)


class WeightsOnlyKind(ImageClassificationExport):
    """A task kind that offers one format and writes it itself (as a causal LM would)."""

    formats = ("safetensors",)
    calls: ClassVar[list] = []

    def write_safetensors(self, job):
        WeightsOnlyKind.calls.append(job.source.weights)
        return []


def test_a_task_kind_plugs_in_formats_and_writers(digits_run, monkeypatch):
    monkeypatch.setattr(job_module, "kind_class", lambda kind, source: WeightsOnlyKind)
    with pytest.raises(UserError, match="format onnx is not available for task"):
        export(digits_run, ["onnx"])
    assert export(digits_run, ["safetensors"]) == []
    assert WeightsOnlyKind.calls == [digits_run / "model.safetensors"]


def test_latency_statistics_count_only_timed_calls():
    calls = []

    def predict(x):
        calls.append(x.shape[0])
        time.sleep(0.002 if len(calls) % 10 else 0.02)  # every 10th call is slow
        return x

    latency = measure_latency(predict, np.zeros((4, 3), np.float32), warmup=3, runs=40)
    assert len(calls) == 43
    assert latency.batch_size == 4 and latency.runs == 40
    assert 1.5 <= latency.p50_ms < 10 <= latency.p99_ms
    assert latency.samples_per_s == pytest.approx(4 / (latency.mean_ms / 1e3))


def _row(name: str, runtime: str, p50: float) -> BenchRow:
    one = Latency(1, 10, p50, p50 * 2, p50, 1e3 / p50)
    many = Latency(8, 10, p50 * 4, p50 * 8, p50 * 4, 8e3 / (p50 * 4))
    return BenchRow(name, runtime, "fp32", "cpu", one, many)


def test_bench_table_states_ratios_and_the_edge_target():
    rows = [_row("onnx", "onnxruntime", 0.5), _row("safetensors", "torch", 2.0)]
    rows.append(_row("big", "torch", 8.0))
    table = render(rows, 8)
    lines = table.splitlines()
    assert "b8 p50 ms" in lines[0]
    assert lines[2].startswith("onnx") and lines[2].endswith("4.00x")
    assert lines[3].endswith("1.00x") and lines[4].endswith("0.25x")
    assert "batch-1 p50 of safetensors (torch, cpu)" in table
    assert table.splitlines()[-1] == (
        "edge target (batch-1 p50 < 5 ms): met by onnx/cpu, safetensors/cpu; missed by big/cpu"
    )


def test_find_artifacts_in_a_run_folder(exported, digits_run, tmp_path):
    names = [a.name for a in find_artifacts(digits_run)]
    assert names == ["int8", "int8-onnx", "onnx", "pruned", "safetensors"]
    assert [a.name for a in find_artifacts(digits_run / "export" / "onnx" / "model.onnx")] == [
        "onnx"
    ]
    with pytest.raises(UserError, match="no export artifacts"):
        find_artifacts(tmp_path)


@pytest.mark.gpu
def test_bench_on_cuda_times_torch_and_notes_what_cannot_run(exported, digits_run):
    from trainforge.export.bench import bench

    rows, notes = bench([digits_run / "export"], batch_size=8, warmup=2, runs=5, devices=["cuda"])
    assert {r.device for r in rows} == {"cuda"}
    assert {"safetensors", "pruned"} <= {r.artifact for r in rows}
    assert any(n.startswith("skipped int8 on cuda") and "CPU only" in n for n in notes)
