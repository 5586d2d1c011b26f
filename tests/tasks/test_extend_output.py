"""A run's own output model is part of the run: extending a finished causal-lm run with
`--resume runs/NAME --max_steps +4` (4 steps past its last checkpoint) updates
`models/<output>` without --overwrite, while another run that names the same output is still
refused without --overwrite."""

from __future__ import annotations

import json

import pytest
from tests.fakes.in_process import run_in_process
from tests.fakes.runs import g2p_plan_command as plan_command
from tests.fakes.runs import g2p_project


@pytest.fixture
def project(tmp_path):
    """The shipped G2P config and small word<TAB>phonemes files; this test extends its run,
    so it trains its own rather than the session's shared g2p_run."""
    return g2p_project(tmp_path)


def _written(project, name="g2p-cmudict-t") -> dict:
    return json.loads((project / "models" / name / "trainforge.json").read_text())


def test_extending_a_finished_run_updates_its_output_model(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    code, out, err = run_in_process(monkeypatch, capsys, *plan_command(4))
    assert code == 0, out[-3000:] + err
    first = _written(project)
    assert first["global_step"] == 4
    assert first["run_dir"] == str((project / "runs" / "g2p_cmudict-t").resolve())

    # The same run, 4 steps further: no --overwrite needed, the output model follows.
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", "--resume", "runs/g2p_cmudict-t", "--max_steps", "+4"
    )
    assert code == 0, out[-3000:] + err
    assert "--max_steps +4: checkpoint-4 is at step 4, so training ends at step 8" in out
    assert "done: finished after 8 steps" in out
    assert "output model: models/g2p-cmudict-t" in out
    assert _written(project)["global_step"] == 8

    # Another run naming the same output: refused in one line, nothing replaced.
    code, out, err = run_in_process(monkeypatch, capsys, *plan_command(2), "--run_name", "other")
    assert code == 2
    assert err.strip().splitlines() == [
        "model folder models/g2p-cmudict-t already exists. pick another --output-name, or "
        "replace it with --overwrite"
    ]
    assert _written(project)["global_step"] == 8
