"""The Train Model dialog: autofill per detected platform (recorded machines), re-reading the
config files on every open, and validation by the CLI's validator with errors per field."""

from __future__ import annotations

import json

from fakes.web import CPU, JETSON, run_form
from trainforge.config import ConfigError, validate
from trainforge.hardware import detect, load_fixture


def test_jetson_detection_autofills_from_the_jetson_profile_and_run_config(make_client):
    client = make_client(fixture=JETSON)
    data = client.get("/api/train/defaults").json()
    assert data["detected"]["profile"] == "jetson-orin"
    assert "Jetson" in data["detected"]["platform"]
    values = data["values"]
    # The Jetson guide: its dataset, 1 epoch, batch size 1, learning rate 2.5e-4.
    assert values["config"] == "config/jetson_training.json"
    assert values["task"] == "causal-lm"
    assert values["dataset"] == "example_datasets/jetson_training.json"
    assert (values["epochs"], values["batch_size"], values["learning_rate"]) == (1, 1, 2.5e-4)
    assert values["profile"] == "jetson-orin"
    assert data["profile"]["guide"] == "docs/jetson_training.md"
    assert "gradient checkpointing" in data["profile"]["notes"]
    assert data["notes"].startswith("Jetson defaults keep GPU memory low")
    assert data["choices"]["models"] == ["base-gpt2"]
    assert data["errors"] == {}


def test_cpu_detection_autofills_the_main_job(make_client):
    data = make_client(fixture=CPU).get("/api/train/defaults").json()
    values = data["values"]
    assert values["config"] == "config/vit_digits.yaml"
    assert (values["task"], values["dataset"], values["profile"]) == (
        "image-classification",
        "digits",
        "cpu",
    )
    assert (values["epochs"], values["batch_size"], values["learning_rate"]) == (40, 64, 0.002)
    assert data["profile"]["guide"] is None


def test_dialog_rereads_the_config_file_each_time_it_opens(make_client, project):
    client = make_client(fixture=JETSON)
    assert client.get("/api/train/defaults").json()["values"]["epochs"] == 1
    path = project / "config" / "jetson_training.json"
    data = json.loads(path.read_text())
    data.update(epochs=3, batch_size=2, notes="Edited between two openings.")
    path.write_text(json.dumps(data))
    again = client.get("/api/train/defaults").json()
    assert (again["values"]["epochs"], again["values"]["batch_size"]) == (3, 2)
    assert again["notes"] == "Edited between two openings."


def test_a_chosen_profile_changes_the_defaults(make_client):
    client = make_client(fixture=JETSON)
    data = client.get(
        "/api/train/defaults", params={"config": "config/vit_digits.yaml", "profile": "jetson-orin"}
    ).json()
    assert data["values"]["profile"] == "jetson-orin"
    assert data["values"]["batch_size"] == 64  # the run config's value wins over the profile's


def test_a_broken_config_file_is_reported_beside_the_config_field(make_client, project):
    (project / "config" / "broken.yaml").write_text("model: [unclosed\n")
    data = make_client().get("/api/train/defaults", params={"config": "config/broken.yaml"}).json()
    assert "invalid YAML" in " ".join(data["errors"]["_form"] + data["errors"].get("config", []))


def test_validation_uses_the_cli_validator_and_places_errors_beside_fields(make_client, project):
    client = make_client()
    form = run_form(batch_size=0, epochs=-1, overrides=["model.embedding_dim=30"])
    response = client.post("/api/runs", json=form)
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert set(errors) >= {"batch_size", "epochs"}
    assert "greater than or equal to 1" in errors["batch_size"][0]
    # The same messages as `trainforge validate` with the same overrides.
    sets = [
        "task.kind=image-classification",
        'data.dataset="digits"',
        "training.num_train_epochs=-1",
        "optimizer.learning_rate=0.002",
        "training.per_device_train_batch_size=0",
    ]
    platform = detect(load_fixture(CPU))
    path = project / "config" / "vit_digits.yaml"
    try:
        validate(path, platform=platform, profile="cpu", overrides=sets)
    except ConfigError as err:
        cli_lines = [line.removeprefix(f"{path}: ") for line in err.lines]
    else:
        raise AssertionError("the CLI validator accepted batch size 0")
    shown = [m for messages in errors.values() for m in messages]
    assert all(line in shown for line in cli_lines), (cli_lines, shown)
    assert not client.get("/api/runs").json()  # nothing was started


def test_cross_field_rule_from_an_override_is_shown_beside_the_overrides(make_client):
    response = make_client().post(
        "/api/runs", json=run_form(overrides=["model.embedding_dim=30", "model.num_heads=4"])
    )
    errors = response.json()["errors"]
    assert response.status_code == 422
    assert any("does not divide model.embedding_dim = 30" in m for m in errors["overrides"])


def test_unknown_override_key_gets_a_did_you_mean(make_client):
    response = make_client().post("/api/runs", json=run_form(overrides=["training.max_step=5"]))
    assert response.status_code == 422
    assert "did you mean training.max_steps?" in response.json()["errors"]["overrides"][0]


def test_overrides_cannot_redirect_outputs_or_read_paths(make_client):
    bad = ["output.dir=/tmp/elsewhere", "data.root=/etc", "not-a-pair"]
    response = make_client().post("/api/runs", json=run_form(overrides=bad))
    messages = response.json()["errors"]["overrides"]
    assert response.status_code == 422 and len(messages) == 3


def test_causal_lm_checks_dataset_file_and_base_model(make_client):
    form = run_form(
        config="config/jetson_training.json",
        task="causal-lm",
        dataset="example_datasets/missing.json",
        base_model="no-such-model",
        profile="cpu",
        overrides=[],
    )
    errors = make_client(fixture=JETSON).post("/api/runs", json=form).json()["errors"]
    assert "no such file" in errors["dataset"][0]
    assert "no model folder models/no-such-model" in errors["base_model"][0]


def test_fp16_profile_on_a_cpu_machine_is_refused_beside_the_profile_field(make_client):
    form = run_form(profile="jetson-orin")  # fp16: needs CUDA, this recorded machine has none
    errors = make_client(fixture=CPU).post("/api/runs", json=form).json()["errors"]
    # Beside the field that chose fp16 (the profile), not under the form.
    assert any("training.precision = 'fp16': needs a CUDA device" in m for m in errors["profile"])
    assert "_form" not in errors


def test_each_error_goes_beside_the_field_it_names_not_a_flag_in_its_hint():
    from trainforge.web.dialog import place_errors

    hint = "or check for the run's hardware with --profile NAME"
    lines = [
        f"training.precision = 'fp16': needs a CUDA device; {hint}",
        "profile = 'nope': unknown profile; pick one of cpu, jetson-orin",
        "optimizer.learning_rate = -1: must be greater than 0",
        "training.max_steps = 0: must be at least 1",
    ]
    errors = place_errors(lines, ["training.max_steps=0"])
    assert errors == {
        "profile": [lines[0], lines[1]],
        "learning_rate": [lines[2]],
        "overrides": [lines[3]],
    }


def test_batch_size_auto_passes_the_validator_and_reaches_the_command_line(project):
    from trainforge.web.dialog import TrainForm, validate_form
    from trainforge.web.settings import WebSettings

    settings = WebSettings(root=project, fixture=CPU)
    platform = detect(load_fixture(CPU))
    resolved, argv = validate_form(settings, platform, TrainForm(**run_form(batch_size="auto")))
    assert resolved.config.training.per_device_train_batch_size == "auto"
    assert "training.per_device_train_batch_size=auto" in argv
    try:
        validate_form(settings, platform, TrainForm(**run_form(batch_size="most")))
    except Exception as err:  # FormErrors, placed beside the batch size field
        assert "batch_size" in err.errors
    else:
        raise AssertionError("batch size 'most' was accepted")


def test_causal_lm_without_a_base_model_is_refused_beside_its_field(make_client):
    """The run would fail at once: the API refuses it (422, field base_model) in the web
    app's words, and starts nothing."""
    client = make_client(fixture=JETSON)
    form = run_form(
        config="config/jetson_training.json",
        task="causal-lm",
        dataset="example_datasets/jetson_training.json",
        base_model=None,
        profile="cpu",
        overrides=[],
        output_name="no-base",
    )
    response = client.post("/api/runs", json=form)
    assert response.status_code == 422
    body = response.json()
    assert list(body["errors"]) == ["base_model"]
    (message,) = body["errors"]["base_model"]
    assert "pick one in Base model (the Models page lists them)" in message
    assert "--" not in message  # no command-line flag in the web app
    assert body["detail"][0]["loc"] == ["body", "base_model"]
    assert client.get("/api/runs").json() == []
