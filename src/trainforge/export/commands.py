"""The `export` and `bench-infer` commands: parse, call the library, print (cli.py delegates)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from trainforge.export.options import ExportOptions
from trainforge.export.pipeline import Result, export
from trainforge.runfolder import summary_file


def _metric_text(summary: dict[str, Any]) -> str:
    metric = summary["metric"]
    value = summary["metrics"][metric]
    delta = summary["metric_delta"].get(metric, 0.0)
    if metric == "accuracy":
        return f"accuracy {value * 100:.2f}% ({delta * 100:+.2f} pt)"
    return f"{metric} {value:.4f} ({delta:+.4f})"


def _hf_folder_lines(result: Result) -> list[str]:
    """A causal LM's Hugging Face folder: no fp32 size reference and no latency timing."""
    s = result.summary
    merged = "LoRA adapter merged into the base weights" if s.get("lora_merged") else "full model"
    return [
        f"{result.folder.name:<12} {result.folder}",
        f"{'':<12} {s['size_bytes'] / 1e6:.2f} MB, {merged}  {_metric_text(s)}",
        f"{'':<12} logits against the trained model: max |diff| {s['max_abs_diff']:.2e} "
        f"(tolerance {s['tolerance']:g}); load with {s['load_with']}",
    ]


def _result_lines(result: Result) -> list[str]:
    s = result.summary
    if s.get("runtime") == "transformers":
        return _hf_folder_lines(result)
    size_mb = s["size_bytes"] / 1e6
    lines = [
        f"{result.folder.name:<12} {result.folder / s['artifact']}",
        f"{'':<12} {size_mb:.2f} MB ({s['size_ratio']:.2f}x fp32)  {_metric_text(s)}  "
        f"batch-1 p50 {s['latency_batch1']['p50_ms']:.3f} ms ({s['runtime']})",
    ]
    if "max_abs_diff" in s:
        lines.append(
            f"{'':<12} onnxruntime vs PyTorch: max |diff| {s['max_abs_diff']:.2e} over "
            f"{s['num_eval_samples']} validation samples (tolerance {s['tolerance']:g}), "
            f"opset {s['opset']}"
        )
        lines.append(f"{'':<12} TensorRT FP16 on a Jetson: {s['tensorrt']['fp16']}")
        lines.append(
            f"{'':<12} TensorRT INT8 (QDQ model from --format int8): {s['tensorrt']['int8']}"
        )
    if "sparsity" in s:
        tuned = s.get("finetune")
        after = f", fine-tuned {tuned['epochs']:g} epoch(s)" if tuned else ", no fine-tuning"
        before = s["metrics_before_finetune"].get("accuracy")
        was = f" (before fine-tuning {before * 100:.2f}%)" if tuned and before is not None else ""
        lines.append(
            f"{'':<12} sparsity {s['sparsity'] * 100:.1f}% of Linear/Conv weights{after}{was}"
        )
    if "calibration_batches" in s:
        lines.append(
            f"{'':<12} static INT8 calibrated on {s['calibration_samples']} training samples "
            f"({s['calibration_batches']} batches, {s['calibration_method']})"
        )
    return lines


def run_export(source: Path, formats: list[str], options: ExportOptions) -> list[Result]:
    with warnings.catch_warnings():
        # torchdata's loader calls a torch API that torch marks deprecated: noise for users.
        warnings.filterwarnings("ignore", message=".set_vital. is deprecated")
        results = export(source, formats, options, progress=lambda line: print(line, flush=True))
    first = results[0].summary
    ref = first["reference_metrics"].get(first["metric"])
    shown = f"{ref * 100:.2f}%" if first["metric"] == "accuracy" else f"{ref:.4f}"
    # A causal LM is scored on its validation loss, not on a count of samples.
    count = first.get("num_eval_samples")
    on = f" on {count} validation samples" if count is not None else " on the validation set"
    print(
        f"source: {first['source']} ({first['task']}, fp32 PyTorch {first['metric']} {shown}{on})"
    )
    for result in results:
        for line in _result_lines(result):
            print(line)
    print(f"summaries: {summary_file(results[0].folder.parent / '*')}")
    return results


def run_bench(
    artifacts: list[Path],
    *,
    batch_size: int,
    warmup: int,
    runs: int,
    threads: int | None,
    devices: list[str] | None,
    json_path: Path | None,
) -> None:
    import torch

    from trainforge.export.bench import bench, render, write_json

    rows, notes = bench(
        artifacts,
        batch_size=batch_size,
        warmup=warmup,
        runs=runs,
        threads=threads,
        devices=devices,
    )
    print(
        f"inference benchmark: {warmup} warm-up + {runs} timed calls per cell, random inputs, "
        f"torch threads {torch.get_num_threads()}"
    )
    if rows:
        print(render(rows, batch_size))
    for note in notes:
        print(note)
    if json_path is not None:
        settings = {"batch_size": batch_size, "warmup": warmup, "runs": runs, "threads": threads}
        write_json(json_path, rows, settings)
        print(f"results: {json_path}")
