"""A run's own output model is part of the run: extending a finished causal-lm run with
`--resume runs/NAME --max_steps +4` (4 steps past its last checkpoint) updates
`models/<output>` without --overwrite, while another run that names the same output is still
refused without --overwrite."""

from __future__ import annotations

import json
import shutil

import pytest
from tests.fakes.in_process import run_in_process
from tests.tasks.test_dgx_plan import CONFIG, WORDS, plan_command


@pytest.fixture
def project(tmp_path):
    """The shipped G2P config and small word<TAB>phonemes files (as test_dgx_plan's)."""
    (tmp_path / "config").mkdir()
    shutil.copy(CONFIG, tmp_path / "config")
    for name, split, count in (("t", "train", 60), ("v", "val", 8), ("test", "test", 8)):
        lines = (WORDS / f"cmudict_{split}.tsv").read_text(encoding="utf-8").splitlines()[:count]
        (tmp_path / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


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
