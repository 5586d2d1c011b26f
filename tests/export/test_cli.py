"""`trainforge export` and `trainforge bench-infer`: the real command and its error lines."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from fakes.in_process import run_main
from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.export.cli import export_main
from trainforge.export.source import resolve_source

ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def one_line_exit_2(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_missing_run_is_one_line_exit_2(tmp_path):
    line = one_line_exit_2(run_main("export", str(tmp_path / "runs" / "nope"), "--format", "onnx"))
    assert "nope not found" in line and "runs/NAME" in line


def test_unknown_format_is_one_line_exit_2(digits_run):
    line = one_line_exit_2(run_main("export", str(digits_run), "--format", "tflite"))
    assert "unknown export format 'tflite'" in line
    assert "onnx, int8, pruned, safetensors" in line


def test_checkpoint_of_another_task_is_one_line_exit_2(digits_run, tmp_path):
    """A checkpoint written by the checkpoint module whose run trained another task."""
    best = digits_run / "checkpoints" / "best_model"
    model_state, state, meta = ckpt.load_checkpoint(best)
    config = yaml.safe_load((best / "config.yaml").read_text())
    config["task"]["kind"] = "object-detection"
    folder = ckpt.save_checkpoint(
        tmp_path / "detector" / "checkpoints" / "best_model",
        model_state=model_state,
        state=state,
        meta=meta,
        config_yaml=yaml.safe_dump(config),
    )
    line = one_line_exit_2(run_main("export", str(folder), "--format", "onnx"))
    assert "trained for task 'object-detection'" in line
    assert "image-classification" in line
    assert not (tmp_path / "detector" / "export").exists()


def test_corrupt_checkpoint_is_refused(digits_run, tmp_path):
    folder = tmp_path / "best_model"
    shutil.copytree(digits_run / "checkpoints" / "best_model", folder)
    with (folder / "model.safetensors").open("r+b") as fh:
        fh.seek(-4, 2)
        fh.write(b"\x00\x01\x02\x03")
    with pytest.raises(UserError, match=r"not usable: checksum mismatch in model\.safetensors"):
        resolve_source(folder)


def test_bad_option_is_one_line_exit_2(capsys):
    assert export_main(["runs/x", "--format", "onnx", "--bogus"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["trainforge export: No such option: --bogus. See trainforge export --help"]


def test_export_a_checkpoint_then_bench_side_by_side(cli, digits_run, exported, tmp_path):
    # Children: OMP_NUM_THREADS takes effect at a process's start only.
    best = digits_run / "checkpoints" / "best_model"
    done = cli(
        "export", str(best), "--format", "safetensors", "--output", str(tmp_path), env=ONE_THREAD
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "safetensors" / "summary.json").read_text())
    assert summary["source"] == str(best / "model.safetensors")
    assert f"{tmp_path}/safetensors/model.safetensors" in done.stdout
    assert "accuracy" in done.stdout and "batch-1 p50" in done.stdout

    out_json = tmp_path / "bench.json"
    bench = cli(
        "bench-infer",
        str(tmp_path / "safetensors"),
        str(digits_run / "export"),
        "--runs", "5", "--warmup", "1", "--batch-size", "8", "--device", "cpu",
        "--json", str(out_json), "--threads", "1",
        env=ONE_THREAD,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    table = bench.stdout
    assert "b1 p50 ms" in table and "b8 p50 ms" in table and "b1 speed" in table
    assert "edge target (batch-1 p50 < 5 ms)" in table
    rows = json.loads(out_json.read_text())["rows"]
    seen = {(r["artifact"], r["runtime"], r["precision"]) for r in rows}
    assert ("safetensors", "torch", "fp32") in seen
    assert ("int8", "torch-int8", "int8") in seen
    assert ("onnx", "onnxruntime", "fp32") in seen
    assert ("int8-onnx", "onnxruntime", "int8") in seen
    assert ("pruned", "torch", "fp32") in seen
    assert len(rows) == 6
    for row in rows:
        assert row["batch1"]["batch_size"] == 1 and row["batch_n"]["batch_size"] == 8
        assert 0 < row["batch1"]["p50_ms"] <= row["batch1"]["p99_ms"]
        assert row["batch_n"]["samples_per_s"] > 0


def test_opset_17_exports_quietly_at_opset_17(cli, digits_run, tmp_path):
    """The JetPack 5 opset: torch's exporter writes 18 and converts down; its multi-line
    notice (and onnxscript's) stay out of the output, and the file is checked to be 17.
    A child: the process's own stderr is what is tested (a notice written below Python's
    sys.stderr would escape a capture in this process)."""
    import onnx

    done = cli(
        "export", str(digits_run), "--format", "onnx", "--opset", "17",
        "--output", str(tmp_path), env=ONE_THREAD,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "opset 17" in done.stdout and "Setting ONNX exporter" not in done.stdout
    model = onnx.load(str(tmp_path / "onnx" / "model.onnx"))
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {17}


def test_a_model_that_misses_the_asked_opset_is_refused(digits_run, tmp_path, monkeypatch):
    """When the conversion leaves the model at another opset, no summary names the wrong one."""
    from trainforge.export import onnx_format
    from trainforge.export.options import ExportOptions
    from trainforge.export.pipeline import export

    monkeypatch.setattr(onnx_format, "written_opset", lambda path: 18)
    options = ExportOptions(output=tmp_path, opset=17, latency_runs=5)
    with pytest.raises(UserError, match=r"wrote opset 18, not the --opset 17"):
        export(digits_run, ["onnx"], options)
    assert list(tmp_path.iterdir()) == []
