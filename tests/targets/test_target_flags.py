"""`--target NAME` on `train`, `slurm` and `sweep`: bad input is one line, exit 2, nothing
submitted (the submissions themselves: test_slurm_target.py, tests/sweep/test_slurm_array.py,
tests/web/test_browser_targets.py)."""

from __future__ import annotations

import pytest

from fakes.in_process import run_in_process

CONFIG = "config/vit_digits.yaml"
JOB = ["--nodes", "1", "--gpus-per-node", "0", "--time", "00:10:00", "--procs-per-node", "1"]


@pytest.fixture
def targets(tmp_path, monkeypatch):
    """A target whose login node refuses connections (port 1 on loopback)."""
    path = tmp_path / "targets.yaml"
    path.write_text("targets:\n  hpc: {host: 127.0.0.1, port: 1}\n", encoding="utf-8")
    monkeypatch.setenv("TRAINFORGE_TARGETS", str(path))
    monkeypatch.setenv("TRAINFORGE_JOBS", str(tmp_path / "jobs.json"))
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", CONFIG, "--target", "nope", *JOB], "unknown target 'nope' (known: local, hpc)"),
        (["train", CONFIG, "--target", "hpc", "--nodes", "1"], "Missing option '--gpus-per-node'"),
        (["train", CONFIG, "--target", "hpc", *JOB], "target hpc: cannot reach 127.0.0.1:1"),
        (["train", CONFIG, "--target", "hpc", *JOB, "--num_thread", "1"], "--num_threads?"),
        (["slurm", CONFIG, "--target", "hpc", *JOB], "--target sends the job to a cluster"),
        (
            ["sweep", CONFIG, "--space", "s.yaml", "--trials", "2", "--target", "hpc"],
            "add --slurm --time HH:MM:SS --submit",
        ),
    ],
)
def test_bad_target_input_is_one_line_and_nothing_is_submitted(
    monkeypatch, capsys, targets, tmp_path, args, message
):
    from trainforge.targets.jobs import all_jobs

    code, out, err = run_in_process(monkeypatch, capsys, *args)
    assert code == 2, out + err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert all_jobs() == []
