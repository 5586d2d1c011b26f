"""The DGX Spark setup plan's smoke test exactly as written, with `python src/train.py`
replaced by `trainforge train config/g2p_cmudict.yaml`: a two-line Hebrew `test_mini.tsv`,
10 steps, checkpoints at 5 and 10, batch 2, against the config's whole CMUdict validation
and test splits. Then a second corpus in the same project, which must not reuse the base
model the smoke test created, and needs neither --overwrite nor names of its own.

The wall time of the smoke run is printed (the plan's goal: under 2 minutes on a 2-core
CPU), never asserted: a test must not depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainforge.engine import checkpoint as ckpt
from trainforge.runfolder import RunFolder

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 1200  # a hung process, not speed
SMOKE = [
    "--data_file", "test_mini.tsv", "--max_steps", "10", "--save_steps", "5", "--batch_size", "2"
]  # fmt: skip


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's project: the shipped config, its data folder, and the plan's test file."""
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "g2p_cmudict.yaml", tmp_path / "config")
    (tmp_path / "example_datasets").symlink_to(REPO / "example_datasets")
    # echo -e "שלום\tʃalˈom\nמה קורה\tmˈa koʁˈe" > test_mini.tsv
    (tmp_path / "test_mini.tsv").write_text("שלום\tʃalˈom\nמה קורה\tmˈa koʁˈe\n", encoding="utf-8")
    return tmp_path


def trainforge(project: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "trainforge", *argv],
        cwd=project, capture_output=True, text=True, env=env, timeout=DEADLINE_S,
    )  # fmt: skip


def summary(folder: Path) -> dict:
    return json.loads((folder / "trainforge.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_the_plans_smoke_test_as_written_then_a_second_corpus(project, capsys):
    started = time.monotonic()
    smoke = trainforge(project, "train", "config/g2p_cmudict.yaml", *SMOKE)
    wall_s = time.monotonic() - started
    with capsys.disabled():
        print(f"\nDGX Spark plan smoke test: exit {smoke.returncode} in {wall_s:.1f} s wall")
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    run = RunFolder(project / "runs" / "g2p_cmudict-test_mini")
    for step in (5, 10):
        assert ckpt.verify(run.checkpoints / f"checkpoint-{step}") is None, step
    out = smoke.stdout
    assert "done: finished after 10 steps" in out
    # Validation by step (the epochs are one step long), 512 words decoded during training,
    # and the whole splits at the end.
    assert "validation: every 500 steps and at the end (by step: an epoch is 1 step(s))" in out
    assert "greedy-decodes 512 of 6232 prompts" in out
    assert re.search(r"^validation \(6232 examples\): .*per [\d.]+, wer [\d.]+$", out, re.M)
    assert re.search(r"^test \(6259 examples\): .*per [\d.]+, wer [\d.]+$", out, re.M)

    # The smoke test's base model is its corpus's own: the name the config gives,
    # models/g2p-small, stays for the config's corpus (CMUdict).
    assert not (project / "models" / "g2p-small").exists()
    (smoke_model,) = sorted((project / "models").glob("g2p-small-test_mini-*"))
    assert (
        "base model models/g2p-small is kept for the config's corpus "
        "example_datasets/g2p/cmudict_train.tsv; this run's corpus test_mini.tsv is another, "
        f"so it uses models/{smoke_model.name}"
    ) in out
    made = summary(smoke_model)["corpus_files"]
    assert [(f["path"], f["size_bytes"]) for f in made] == [
        ("test_mini.tsv", (project / "test_mini.tsv").stat().st_size)
    ]

    # A second corpus: a base model of its own too, and the smoke test's is untouched.
    words = (REPO / "example_datasets/g2p/cmudict_train.tsv").read_text(encoding="utf-8")
    (project / "words.tsv").write_text("".join(words.splitlines(True)[:40]), encoding="utf-8")
    second = trainforge(
        project, "train", "config/g2p_cmudict.yaml", "--data_file", "words.tsv",
        "--eval_file", "words.tsv", "--test_file", "null", "--max_steps", "2",
    )  # fmt: skip
    # No --overwrite, no names: the second corpus names its own run folder and output model.
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert RunFolder(project / "runs" / "g2p_cmudict-words").is_run()
    assert (project / "models" / "g2p-cmudict-words" / "config.json").is_file()
    assert (project / "models" / "g2p-cmudict-test_mini" / "config.json").is_file()
    own = sorted((project / "models").glob("g2p-small-words-*"))
    assert len(own) == 1, sorted(p.name for p in (project / "models").iterdir())
    assert f"creating base model models/{own[0].name}" in second.stdout
    assert [f["path"] for f in summary(own[0])["corpus_files"]] == ["words.tsv"]
    assert summary(smoke_model)["corpus_files"] == made  # the smoke test's model is untouched
    assert not (project / "models" / "g2p-small").exists()  # still the config corpus's name
    assert "test (" not in second.stdout  # --test_file null: no test split
