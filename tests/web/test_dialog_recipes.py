"""The Train Model dialog and the packaged recipes, and what a submission sends: a server in an
empty folder offers the recipes by name; a field left at the value the dialog showed is no
override, so a batch changed in the dialog reaches the learning rate the CLI reaches for the
same change."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes.web import CPU, TINY_VIT, run_form
from trainforge import recipes
from trainforge.config import flags as run_flags
from trainforge.hardware import detect, load_fixture
from trainforge.run.resume import resolve_run
from trainforge.web.dialog import TrainForm, defaults, validate_form
from trainforge.web.settings import WebSettings


@pytest.fixture
def cpu():
    return detect(load_fixture(CPU))


def cli_rate(folder: Path, monkeypatch, *words: str) -> float:
    """The learning rate `trainforge train WORDS` trains with, run in `folder`."""
    monkeypatch.chdir(folder)
    resolved, _ = resolve_run(run_flags.parse(list(words)), detect(load_fixture(CPU)), 1)
    return resolved.config.optimizer.learning_rate


def test_a_batch_changed_in_the_dialog_scales_the_rate_as_the_cli_does(
    make_client, project, monkeypatch
):
    client = make_client()
    shown = client.get(
        "/api/train/defaults", params={"config": "config/vit_digits.yaml", "profile": "cpu"}
    ).json()["values"]
    # What the page sends when the user changes the batch alone: every field as it showed it.
    form = run_form(
        batch_size=128, **{k: shown[k] for k in ("epochs", "learning_rate", "dataset", "task")}
    )
    response = client.post("/api/runs", json=form)
    assert response.status_code == 201, response.text
    argv = response.json()["argv"]
    assert "training.per_device_train_batch_size=128" in argv
    assert not [
        a for a in argv if a.startswith(("optimizer.learning_rate=", "training.num_train_epochs="))
    ]
    cli = cli_rate(project, monkeypatch, "config/vit_digits.yaml", "--profile", "cpu",
                   "--batch_size", "128")  # fmt: skip
    web = cli_rate(project, monkeypatch, *argv)
    assert web == cli == pytest.approx(shown["learning_rate"] * 2)  # linear: 64 -> 128


def test_a_rate_the_user_typed_is_kept_as_the_cli_keeps_a_given_one(make_client, project):
    form = run_form(batch_size=128, learning_rate=0.001)
    argv = make_client().post("/api/runs", json=form).json()["argv"]
    assert "optimizer.learning_rate=0.001" in argv


def test_an_empty_folder_offers_the_packaged_recipes_by_name(tmp_path, cpu):
    settings = WebSettings(root=tmp_path, fixture=CPU)
    data = defaults(settings, cpu, None)
    assert data["choices"]["configs"] == recipes.names()
    assert data["values"]["config"] == "vit_digits" and data["errors"] == {}
    g2p = defaults(settings, cpu, "g2p_cmudict")["values"]
    assert g2p["dataset"] == "example_datasets/g2p/cmudict_train.tsv"  # as the recipe writes it
    form = TrainForm(**run_form(config="vit_digits", overrides=list(TINY_VIT)))
    resolved, argv = validate_form(settings, cpu, form)
    assert argv[0] == "vit_digits" and resolved.path == recipes.get("vit_digits").file


def test_a_project_config_of_the_same_name_stands_for_the_recipe(project, cpu):
    choices = defaults(WebSettings(root=project, fixture=CPU), cpu, None)["choices"]["configs"]
    assert "config/vit_digits.yaml" in choices and "vit_digits" not in choices
    (project / "config" / "g2p_cmudict.yaml").unlink()
    choices = defaults(WebSettings(root=project, fixture=CPU), cpu, None)["choices"]["configs"]
    assert "g2p_cmudict" in choices
