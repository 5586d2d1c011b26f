"""Edge-aware search on digits: accuracy against the latency of each trial's exported model,
a study of two objectives, and the Pareto front in summary.md and report.html."""

from __future__ import annotations

import csv
import json

import pytest

from fakes.sweeps import load_study, refuse_sweep, run_sweep, sweep_args

SPACE = (
    "params:\n  model.embedding_dim: {choice: [16, 128]}\n  model.num_layers: {choice: [1, 4]}\n"
)


@pytest.mark.slow
def test_two_objective_digits_sweep_times_every_trials_export(tmp_path, space_file):
    space = space_file(SPACE)
    args = sweep_args(space, 4, "edge", "--max_steps", "100", "--set", "evaluation.eval_steps=50",
                      "--objective", "accuracy:max", "--objective", "latency_ms:min")  # fmt: skip
    done = run_sweep(tmp_path, args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "accuracy (maximize) and latency_ms (minimize), pruner none" in done.stdout
    folder = tmp_path / "runs" / "edge"
    study = load_study(folder)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert len(study.trials) == 4 and all(t.state.name == "COMPLETE" for t in study.trials)
    for t in study.trials:
        trial_dir = folder / f"trial-{t.number:03d}"
        timed = json.loads((trial_dir / "export" / "latency.json").read_text())
        # The reported latency is the batch-1 median bench-infer's code measured on this
        # trial's own exported ONNX model, on one thread.
        assert t.values[1] == timed["rows"][0]["batch1"]["p50_ms"] == t.user_attrs["latency_ms"]
        assert timed["settings"]["threads"] == 1 and timed["rows"][0]["batch1"]["batch_size"] == 1
        assert timed["rows"][0]["artifact"] == "onnx" and timed["rows"][0]["device"] == "cpu"
        assert (trial_dir / "export" / "onnx" / "model.onnx").is_file()
        exported = json.loads((trial_dir / "export" / "onnx" / "summary.json").read_text())
        assert (tmp_path / exported["source"]).parent == trial_dir  # this trial's final model
    front = {t.number for t in study.best_trials}
    assert len(front) >= 2, [t.values for t in study.trials]

    md = (folder / "summary.md").read_text()
    assert "## Pareto front: accuracy against latency_ms" in md
    table = md.split("## Pareto front")[1]
    for t in study.trials:
        assert (f"| trial-{t.number:03d} |" in table) == (t.number in front)
    assert "| within 5 ms |" in table
    rows = {r["trial"]: r for r in csv.DictReader((folder / "summary.csv").open())}
    for t in study.trials:
        row = rows[f"trial-{t.number:03d}"]
        assert float(row["latency_ms"]) == t.values[1]
        assert row["pareto"] == str(t.number in front)
        assert row["within_budget"] == str(t.values[1] < 5.0)
    report = (folder / "report.html").read_text()
    assert "Pareto front: accuracy against latency_ms" in report
    assert report.count("<tr><td>trial-") == len(front)


def test_an_edge_sweep_as_a_slurm_array_passes_its_objectives_to_every_task(tmp_path, space_file):
    args = sweep_args(space_file(SPACE), 4, "edge", "--objective", "accuracy:max",
                      "--objective", "latency_ms:min", "--export-format", "int8",
                      "--slurm", "--time", "00:10:00")  # fmt: skip
    done = refuse_sweep(tmp_path, args)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("exec python")]
    assert (
        "--objective accuracy:max --objective latency_ms:min --export-format int8 "
        "--latency-budget-ms 5.0 --pruner none" in line
    )
    assert "--metric" not in line


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--objective", "latency_ms:min"], "give one training metric, and latency_ms besides"),
        (["--objective", "accuracy:up"], "--objective accuracy:up: use NAME:max or NAME:min"),
        (["--objective", "accuracy:max", "--objective", "latency_ms:min", "--pruner", "median"],
         "--pruner median: Optuna prunes no study of several objectives"),
        (["--export-format", "int8"], "--export-format: only with --objective latency_ms:min"),
    ],
)  # fmt: skip
def test_objectives_that_cannot_run_are_refused_in_one_line(tmp_path, space_file, extra, said):
    done = refuse_sweep(tmp_path, sweep_args(space_file(SPACE), 2, "edge", *extra))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert said in line
    assert not (tmp_path / "runs").exists()
