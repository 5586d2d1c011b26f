"""What a real run writes, through the same `trainforge.train.train` path as `trainforge train`:
tokens/s of a text task against independently counted target tokens, MFU from the
`hardware.peak_tflops` override, and the report written at the end of every run."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from fakes.runs import QUIET, TINY_VIT
from fakes.tiny_lm import lm_overrides
from trainforge.config import validate
from trainforge.hardware import detect
from trainforge.train import train

REPO = Path(__file__).resolve().parents[2]
TINY_DIGITS = {
    **TINY_VIT,
    **QUIET,  # no TensorBoard, trackers or report: drawn only where a test reads it
    "training.num_threads": 1,
    "hardware.telemetry": "false",
    "checkpoint.save_every_epochs": "null",
}


def records(run: Path, split: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def train_digits(tmp_path: Path, name: str, **sets):
    overrides = {**TINY_DIGITS, "output.dir": str(tmp_path), "output.run_name": name, **sets}
    platform = detect()
    resolved = validate(
        REPO / "config" / "vit_digits.yaml",
        platform=platform,
        profile="cpu",
        overrides=[f"{k}={v}" for k, v in overrides.items()],
    )
    return train(resolved, platform)


def test_text_run_logs_tokens_per_s_of_the_target_tokens(
    tmp_path, tiny_gpt2, lm_corpus, single_thread
):
    """One epoch of a causal LM in windows of 2 steps. Each window's tokens/s times its wall
    time must equal the target tokens (labels that are not -100) of exactly the batches it
    trained, counted here from a fresh loader with the same seed (same order).

    Tolerance: tokens_per_s and step_time_s share the window's wall time, so the product
    matches to float rounding (relative 1e-9). A tokens/s that counted prompt or padding
    tokens, samples, or one micro-batch per step would be off by a factor, not a rounding.
    """
    from trainforge.tasks import build_task

    sets = {
        "output.dir": str(tmp_path),
        "output.run_name": "lm",
        "logging.jsonl": "true",
        "logging.logging_steps": 2,
        "training.per_device_train_batch_size": 4,
        "training.gradient_accumulation_steps": 2,
        "training.num_train_epochs": 1,
        "evaluation.eval_every_epochs": "null",
        "hardware.telemetry": "false",
    }
    overrides = lm_overrides(tiny_gpt2.resolve(), lm_corpus["json"], **sets)
    platform = detect()
    resolved = validate(None, platform=platform, profile="cpu", overrides=overrides)
    batches = list(build_task(resolved.config).train_loader)
    targets = [int((b["labels"][:, 1:] != -100).sum()) for b in batches]
    # One optimizer step = 2 micro-batches; the epoch's last step may hold only one.
    step_tokens = [sum(targets[i : i + 2]) for i in range(0, len(targets), 2)]

    started = time.perf_counter()
    summary = train(resolved, platform)
    elapsed_s = time.perf_counter() - started

    windows = records(tmp_path / "lm", "train")
    assert summary.global_step == len(step_tokens) >= 4
    assert len(windows) >= 2
    previous, window_wall_s = 0, 0.0
    for window in windows:
        steps = window["step"] - previous
        expected = sum(step_tokens[previous : window["step"]])
        wall_s = window["step_time_s"] * steps
        assert window["tokens_per_s"] == pytest.approx(expected / wall_s, rel=1e-9)
        # Samples are not tokens: the two rates differ by the tokens per sample (> 1).
        assert window["tokens_per_s"] > 2 * window["samples_per_s"]
        previous, window_wall_s = window["step"], window_wall_s + wall_s
    assert previous == summary.global_step  # every step belongs to one window
    # Honest wall time: the windows cannot have taken longer than the whole call, and the
    # loop's own clock (no evaluation in this run) is mostly window time.
    assert window_wall_s <= elapsed_s
    assert window_wall_s >= 0.5 * summary.train_time_s


def test_peak_tflops_override_gives_mfu_in_the_log_and_the_summary(tmp_path):
    """CPUs have no table entry: without the measured peak, MFU appears only with
    `hardware.peak_tflops`; with both, `mfu` is the configured one's."""
    no_probe = {"training.max_steps": 4, "logging.logging_steps": 2}
    train_digits(tmp_path, "no-peak", **no_probe, **{"hardware.measure_peak": "false"})
    plain = records(tmp_path / "no-peak", "train")
    assert plain and all("mfu" not in r and r["model_tflops"] > 0 for r in plain)
    summary = json.loads((tmp_path / "no-peak" / "summary.json").read_text())
    assert summary["mfu"] is None and summary["measured_peak_tflops"] is None

    peak = 1.0  # TFLOPS
    train_digits(tmp_path, "peak", **no_probe, **{"hardware.peak_tflops": peak})
    windows = records(tmp_path / "peak", "train")
    assert [r["step"] for r in windows] == [2, 4]
    summary = json.loads((tmp_path / "peak" / "summary.json").read_text())
    measured = summary["measured_peak_tflops"]
    assert summary["peak_tflops"] == peak and measured > 0
    for window in windows:
        assert window["mfu"] == pytest.approx(window["model_tflops"] / peak, rel=1e-9)
        assert window["mfu_measured"] == pytest.approx(window["model_tflops"] / measured)
        assert window["mfu"] > 0
    assert summary["mfu"] == windows[-1]["mfu"]
    assert summary["mfu_measured"] == windows[-1]["mfu_measured"]


def test_the_digits_run_on_a_cpu_reports_mfu_against_the_measured_peak(tmp_path, monkeypatch):
    """The main job's model (config/vit_digits.yaml as shipped) for a few steps: the CPU has
    no data sheet peak, so MFU is against the probe's, in (0, 1]. The run measures its own
    peak (an empty cache), so the probe and the training see the same machine load."""
    monkeypatch.setenv("TRAINFORGE_CACHE_DIR", str(tmp_path / "cache"))
    sets = {
        "model.embedding_dim": 128, "model.num_layers": 4, "model.num_heads": 4,
        "model.mlp_size": 256, "training.max_steps": 12, "logging.logging_steps": 4,
    }  # fmt: skip
    train_digits(tmp_path, "digits", **sets)
    summary = json.loads((tmp_path / "digits" / "summary.json").read_text())
    assert summary["peak_tflops"] is None and summary["measured_peak_tflops"] > 0
    assert 0 < summary["mfu"] <= 1
    assert summary["mfu"] == summary["mfu_measured"]
    for window in records(tmp_path / "digits", "train"):
        achieved = window["model_tflops"] / summary["measured_peak_tflops"]
        assert window["mfu"] == pytest.approx(achieved, rel=1e-9)


@pytest.mark.parametrize(
    ("name", "sets", "stop"),
    [
        ("finished", {"training.max_steps": 3}, "finished"),
        # 0.36 ms: the time limit (checked at epoch start too) stops the run at once.
        pytest.param(
            "time-limit",
            {"training.max_steps": 50, "training.max_training_hours": 1e-7},
            "time limit",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_report_is_written_at_the_end_of_every_run(tmp_path, name, sets, stop, capsys):
    sets = {"logging.logging_steps": 1, "logging.report": "true", **sets}
    summary = train_digits(tmp_path, name, **sets)
    run = tmp_path / name
    assert stop in summary.stop_reason
    report = run / "report.html"
    assert report.is_file()  # no `trainforge report` was called
    assert f"report: {report}" in capsys.readouterr().out
    assert report.stat().st_mtime >= (run / "summary.json").stat().st_mtime
    plots = {p.name for p in (run / "report").glob("*.png")}
    assert "confusion.png" in plots  # the final validation's confusion matrix
    if summary.global_step:  # curves only where training steps were logged
        assert {"loss.png", "lr.png"} <= plots
    # The report describes this run: its summary carries the run's own training time.
    match = re.search(r'id="summary-train_time_s" data-value="([^"]+)"', report.read_text())
    assert match and float(match.group(1)) == summary.train_time_s


def test_a_run_with_the_report_off_ends_without_drawing_it(tmp_path, capsys):
    """`logging.report: false`: the run's own files are all there, the report is not (and
    nothing says it was written); `trainforge report RUN` can draw it later."""
    summary = train_digits(tmp_path, "quiet", **{"training.max_steps": 2})
    run = tmp_path / "quiet"
    assert summary.global_step == 2 and (run / "summary.json").is_file()
    assert (run / "metrics.jsonl").is_file() and (run / "eval" / "confusion.json").is_file()
    assert not (run / "report.html").exists() and not (run / "report").exists()
    assert "report:" not in capsys.readouterr().out
