"""`make test-gpu` and `make bench-gpu` on a machine without a GPU: the targets, the size of
the CUDA suite, the bench's one-line refusal without CUDA, its Markdown summary, a failing row
that does not take the others down, and every row run end to end on the CPU (`--tiny`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu_suite

REPO = Path(__file__).resolve().parents[2]


def test_make_shows_both_targets_with_the_output_folder(tmp_path):
    done = subprocess.run(
        ["make", "-n", "test-gpu", "bench-gpu", f"OUT={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"-m gpu -rs -v --durations=20 tests --junitxml={tmp_path}/test-gpu.xml" in done.stdout
    assert f"tee {tmp_path}/test-gpu.log" in done.stdout
    assert f"benchmarks/gpu_suite.py {tmp_path}" in done.stdout


def test_the_cuda_suite_has_at_least_25_tests_and_each_is_gpu_marked():
    # Only the files that name the marker are collected (the whole tree costs 15 s): a test
    # marked gpu is in one of them by definition; `-m gpu` still decides which of theirs count.
    files = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if "mark.gpu" in path.read_text(encoding="utf-8")
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", *files],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    in_suite = [i for i in ids if i.startswith("tests/gpu/")]
    assert len(ids) >= 25 and len(in_suite) >= 25, ids
    for area in ("precision_guard", "memory_paths", "batch_fit_compile", "resume",
                 "telemetry_mfu", "artefacts", "launch"):  # fmt: skip
        assert any(f"tests/gpu/test_{area}.py::" in i for i in ids), area
    assert any(i.startswith("tests/web/test_real_runs_gpu.py::") for i in ids)


def test_without_cuda_bench_gpu_refuses_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_suite.main([str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench-gpu: no CUDA device on this machine")
    assert "--device cpu --tiny" in err[0] and not (tmp_path / "out").exists()
    assert gpu_suite.main([str(tmp_path), "--rows", "vit,warp"]) == 2
    assert capsys.readouterr().err.strip() == (
        "bench-gpu: unknown row warp; rows: vit, input, checkpoint, g2p"
    )


def test_the_summary_has_each_rows_table_its_failure_and_every_figure(tmp_path):
    results = {
        "vit": {"status": "ok", "text": "ViT table\nrow 1", "seconds": 12.3,
                "figures": {"vit_eager_images_per_s": 1234.5, "vit_eager_mfu": 0.41}},
        "input": {"status": "failed", "why": "exit status 1", "seconds": 2.0,
                  "last_line": "RuntimeError: boom"},
    }  # fmt: skip
    text = gpu_suite.write_summary(tmp_path, results, "test machine").read_text()
    assert text.startswith("# trainforge GPU benchmarks\n\n- machine: test machine\n")
    assert "## ViT-S/4 images/s and MFU, eager and compiled (12 s)\n\n```text\nViT table" in text
    assert "## CIFAR-shaped input pipeline on the device (2 s)" in text
    assert "**failed** (exit status 1): `RuntimeError: boom`; see `logs/input.log`" in text
    assert "| vit_eager_images_per_s | 1234 |" in text and "| vit_eager_mfu | 0.41 |" in text


def test_a_row_that_fails_is_reported_and_the_next_row_still_runs(tmp_path, monkeypatch):
    for folder in ("logs", "rows"):
        (tmp_path / folder).mkdir()
    args = gpu_suite.argparse.Namespace(out=tmp_path, device="cpu", g2p_budget_s=1.0, tiny=True)
    monkeypatch.setattr(gpu_suite.sys, "executable", "false")  # the row's process exits 1
    failed = gpu_suite.spawn_row("input", args)
    assert failed["status"] == "failed" and failed["why"] == "exit status 1"
    assert (tmp_path / "logs" / "input.log").is_file()
    monkeypatch.undo()
    (tmp_path / "rows" / "checkpoint.json").write_text("{}")  # a stale file never counts
    ok = gpu_suite.spawn_row("checkpoint", args)
    assert ok["status"] == "ok", (tmp_path / "logs" / "checkpoint.log").read_text()[-3000:]
    assert ok["figures"]["checkpoint_stall_ratio"] > 0


@pytest.mark.slow
def test_every_row_runs_end_to_end_on_the_cpu_and_the_summary_collects_them(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_suite.py"), str(tmp_path),
         "--device", "cpu", "--tiny"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    logs = {p.name: p.read_text()[-2000:] for p in (tmp_path / "logs").glob("*.log")}
    assert done.returncode == 0, (done.stdout[-3000:], logs)
    summary = (tmp_path / "summary.md").read_text()
    for name in gpu_suite.ROWS:
        row = json.loads((tmp_path / "rows" / f"{name}.json").read_text())
        assert row["figures"] and row["text"].splitlines()[0] in summary
        assert f"## {gpu_suite.TITLES[name]} (" in summary
    assert re.search(r"\| vit_compiled_mfu_measured \| [\d.e-]+ \|", summary)
    assert "| input_device_vs_pinned_host |" in summary
