"""Honest outcomes and what comes after a sweep: exit 1 with one line when no trial completed,
a sweep that could never validate refused before its first trial, a finite space smaller
than --trials refused, `--trials +N` extending a finished sweep, `sweep status` naming the
best trial's folder and its export command, and optuna-dashboard reading the journal."""

from __future__ import annotations

import csv
import json
import os
import sys

import pytest

from fakes.sweeps import load_study, refuse_sweep, run_sweep, sweep_args

SPACE = "params:\n  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n"
SMALL = ["--set", "model.num_layers=1", "--set", "model.embedding_dim=32"]


def test_a_sweep_in_which_every_trial_failed_exits_1_with_one_line(tmp_path, space_file):
    # Every trial reads an image folder that is not there: each fails at start-up.
    space = space_file(SPACE)
    args = sweep_args(space, 2, "fails", "--set", "data.dataset=image-folder",
                      "--set", "data.root=nowhere", "--max_steps", "5")  # fmt: skip
    done = refuse_sweep(tmp_path, args)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("sweep runs/fails: 0 of 2 trials completed: 2 failed (")
    assert "data.root nowhere does not exist" in line
    assert "Fix: see runs/fails/logs/trial-000.log" in line
    assert "2 of 2 trials finished: 0 completed, 0 pruned, 2 failed" in done.stdout
    rows = list(csv.DictReader((tmp_path / "runs" / "fails" / "summary.csv").open()))
    assert [r["state"] for r in rows] == ["FAIL", "FAIL"]
    assert "0 completed, 0 pruned, 2 failed" in (tmp_path / "runs/fails/summary.md").read_text()


def test_trials_that_would_never_validate_are_refused_before_the_first(tmp_path, space_file):
    space = space_file(SPACE)
    args = sweep_args(space, 2, "blind", "--set", "checkpoint.save_best=false")
    at = args.index("evaluation.eval_steps=5")
    args[at] = "evaluation.eval_steps=null"
    done = refuse_sweep(tmp_path, args)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "no trial would validate, so none would report accuracy" in line
    assert "set evaluation.eval_steps=N" in line
    assert not (tmp_path / "runs").exists()


def test_more_trials_than_a_finite_space_has_points_are_refused(tmp_path, space_file):
    space = space_file("params:\n  model.embedding_dim: {choice: [16, 32]}\n")
    done = refuse_sweep(tmp_path, sweep_args(space, 3, "small"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "--trials 3: the space has 2 distinct points" in line and "--trials 2" in line
    assert not (tmp_path / "runs").exists()


def test_plus_n_needs_a_sweep_to_extend(tmp_path, space_file):
    done = refuse_sweep(tmp_path, sweep_args(space_file(SPACE), "+2", "none"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "--trials +2: runs/none holds no sweep to extend; give --trials 2" in line


@pytest.mark.slow
def test_plus_n_extends_a_finished_sweep_and_status_names_the_best_folder(tmp_path, space_file):
    space = space_file(SPACE)
    first = run_sweep(tmp_path, sweep_args(space, 2, "grow", "--max_steps", "10", *SMALL))
    assert first.returncode == 0, first.stdout + first.stderr
    more = run_sweep(tmp_path, sweep_args(space, "+1", "grow", "--max_steps", "10", *SMALL))
    assert more.returncode == 0, more.stdout + more.stderr
    assert "sweep runs/grow: 3 trials" in more.stdout and "trial-002: starting" in more.stdout
    folder = tmp_path / "runs" / "grow"
    study = load_study(folder)
    assert len(study.trials) == 3 and json.loads((folder / "sweep.json").read_text())["trials"] == 3
    status = run_sweep(tmp_path, [sys.executable, "-m", "trainforge", "sweep", "status",
                                  "runs/grow"])  # fmt: skip
    assert status.returncode == 0, status.stderr
    best = f"trial-{study.best_trial.number:03d}"
    assert f"best: {best} (accuracy {study.best_value:.6g}): runs/grow/{best}" in status.stdout
    assert f"export it: trainforge export runs/grow/{best} --format onnx" in status.stdout
    assert "3 of 3 trials finished: 3 completed, 0 pruned, 0 failed" in status.stdout


def test_optuna_dashboards_own_storage_loader_reads_the_journal(tmp_path):
    """`optuna-dashboard runs/NAME/study.journal`: the dashboard's storage guess reads the
    sweep's journal, and its app serves the study (called as a WSGI app, no server)."""
    import io
    from wsgiref.util import setup_testing_defaults

    from optuna_dashboard import wsgi
    from optuna_dashboard._storage_url import get_storage

    from trainforge.sweep import study as studies
    from trainforge.sweep.space import parse_space
    from trainforge.sweep.study import SweepFolder

    folder = SweepFolder(tmp_path / "runs" / "viewed")
    request = {
        "space": {"params": {"model.mlp_dropout": {"uniform": [0.0, 0.2]}}},
        "trials": 2, "metric": "accuracy", "direction": "maximize", "pruner": "none",
    }  # fmt: skip
    space, _ = parse_space(request["space"], "space")
    study = studies.open_study(folder, request)
    for value in (0.5, 0.75):
        trial, _, lease = studies.claim(folder, study, 2, space)
        os.close(lease)
        study.tell(trial, value)

    storage = get_storage(str(folder.journal))
    (seen,) = storage.get_all_studies()
    assert seen.study_name == "viewed"
    trials = storage.get_all_trials(seen._study_id)
    assert [t.value for t in trials] == [0.5, 0.75]

    app = wsgi(str(folder.journal))
    environ: dict = {"PATH_INFO": "/api/studies", "REQUEST_METHOD": "GET"}
    setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO()
    status: list[str] = []
    body = b"".join(app(environ, lambda s, headers, exc=None: status.append(s)))
    assert status[0].startswith("200"), status
    (summary,) = json.loads(body)["study_summaries"]
    assert summary["study_name"] == "viewed" and summary["directions"] == ["maximize"]
