"""`trainforge evaluate RUN`: the run's model scored on its whole splits gives the numbers the
run's own closing evaluation logged (the same weights, the same passes), a file is scored as
the validation split, and a wrong checkpoint or split is one line."""

from __future__ import annotations

import json

import pytest
from tests.fakes.cli_args import DIGITS_TINY
from tests.fakes.in_process import run_in_process
from tests.fakes.runs import G2P_WORDS as WORDS
from tests.fakes.runs import g2p_plan_command as plan_command
from tests.fakes.runs import g2p_project

# g2p_run (tests/conftest.py): the session's finished 4-step G2P run, read only here.


def _final_records(run_dir) -> dict[str, dict]:
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["split"]: r for r in records if r["split"] in ("val", "test")}


def test_evaluate_reproduces_the_runs_closing_evaluation(g2p_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # elsewhere: evaluate works where the run started
    run = g2p_run / "runs" / "g2p_cmudict-t"
    code, out, err = run_in_process(
        monkeypatch, capsys, "evaluate", str(run), "--json", "scores.json"
    )
    assert code == 0, out[-3000:] + err
    assert "evaluating " in out and "checkpoint-4" in out and "(step 4)" in out
    result = json.loads((tmp_path / "scores.json").read_text())
    logged = _final_records(run)
    for name, split in (("validation", "val"), ("test", "test")):
        scored = result["results"][name]
        assert scored["examples"] == 8
        for key in ("loss", "per", "wer", "accuracy"):
            assert scored[key] == logged[split][key], (name, key)
    assert not (g2p_run / "models" / "tiny-g2p-words").exists()  # no base model made


def test_evaluate_scores_a_csv_file_with_a_header(g2p_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the file here, the shared run left as it is
    lines = (WORDS / "cmudict_val.tsv").read_text(encoding="utf-8").splitlines()[8:13]
    rows = [line.split("\t") for line in lines]
    (tmp_path / "words.csv").write_text(
        "word,phonemes\n" + "".join(f"{w},{p}\n" for w, p in rows), encoding="utf-8"
    )
    code, out, err = run_in_process(
        monkeypatch, capsys, "evaluate", str(g2p_run / "runs" / "g2p_cmudict-t"),
        "--file", "words.csv",
        "--checkpoint", "checkpoint-4",
    )  # fmt: skip
    assert code == 0, out[-3000:] + err
    (line,) = [x for x in out.splitlines() if x.startswith("file words.csv")]
    assert line.startswith("file words.csv (5 examples): loss ")
    assert " per " in line and " wer " in line


def test_a_missing_checkpoint_is_one_line_naming_the_ones_there(g2p_run, monkeypatch, capsys):
    monkeypatch.chdir(g2p_run)
    code, _out, err = run_in_process(
        monkeypatch, capsys, "evaluate", "runs/g2p_cmudict-t", "--checkpoint", "checkpoint-9"
    )
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("--checkpoint checkpoint-9: no such checkpoint in ")
    assert "checkpoint-4" in line


def test_evaluate_scores_an_image_run_as_its_validation_did(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", *DIGITS_TINY, "--max_steps", "4", "--num_threads", "1",
        "--set", "evaluation.eval_steps=4",
    )  # fmt: skip
    assert code == 0, out[-3000:] + err
    run = tmp_path / "runs" / "vit_digits"
    logged = _final_records(run)["val"]
    code, out, err = run_in_process(
        monkeypatch, capsys, "evaluate", str(run), "--split", "val", "--json", "e.json"
    )
    assert code == 0, out[-3000:] + err
    assert f"evaluating {run / 'model.safetensors'} (step 4) on cpu" in out  # the final model's
    assert json.loads((tmp_path / "e.json").read_text())["step"] == 4
    scored = json.loads((tmp_path / "e.json").read_text())["results"]["validation"]
    assert scored["accuracy"] == logged["accuracy"]
    assert scored["loss"] == pytest.approx(logged["loss"], rel=1e-6)
    code, out, err = run_in_process(monkeypatch, capsys, "evaluate", str(run), "--file", "e.json")
    assert code == 2
    assert err.strip().splitlines() == [
        f"--file {tmp_path / 'e.json'}: only text runs score a file (image-classification "
        "run). score its own validation split: trainforge evaluate RUN"
    ]


def test_sigint_during_the_closing_evaluation_exits_130_with_the_model_saved(
    tmp_path, monkeypatch, capsys
):
    """Every stop exits 128 + its signal: a SIGINT that cuts the closing evaluation short
    too (the model is saved all the same, and summary.json says which signal)."""
    from trainforge.engine import stop
    from trainforge.tasks.causal_lm import CausalLM

    project = g2p_project(tmp_path)
    monkeypatch.chdir(project)

    def interrupted(self, model, dataset):  # as the signal handler's flag makes a pass end
        raise stop.StopRequested("SIGINT")

    monkeypatch.setattr(CausalLM, "evaluate_dataset", interrupted)
    code, out, err = run_in_process(monkeypatch, capsys, *plan_command(4))
    assert code == 130, out[-3000:] + err
    assert "SIGINT: final evaluation stopped; the model is saved" in out
    run = project / "runs" / "g2p_cmudict-t"
    assert json.loads((run / "summary.json").read_text())["final_stop"] == "SIGINT"
    assert (project / "models" / "g2p-cmudict-t" / "config.json").is_file()
