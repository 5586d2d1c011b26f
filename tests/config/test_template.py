"""`trainforge profiles template NAME`: a complete, commented run config per profile that
validates as written and trains; a profile written to a file is accepted by `--profile`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fakes.in_process import run_in_process
from trainforge.config import leaf_paths, validate
from trainforge.config.schema import RunConfig
from trainforge.config.template import SECTIONS, render_template
from trainforge.hardware import detect, load_fixture
from trainforge.profiles import list_profiles, load_profile

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "hardware" / "fixtures"
MACHINE = {
    "cpu": "cpu",
    "jetson-orin": "jetson-orin-jp6",
    "workstation-24gb": "cuda-workstation",
    "dgx-spark": "dgx-spark",
    "hpc-a100": "slurm-a100",
}
# Three steps of the digits ViT at CPU precision on this machine, whatever the profile.
ON_CPU = [
    "training.precision=fp32", "training.max_steps=3", "training.device=cpu",
    "training.num_threads=1", "data.dataset=digits", "data.dataloader_num_workers=0",
    "model.embedding_dim=16", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=16",
    "logging.mlflow=false", "logging.wandb=false", "hardware.telemetry=false",
    "hardware.launcher=local", "hardware.distributed_backend=auto",
    "hardware.swap_directory=null", "evaluation.per_device_eval_batch_size=64",
    "logging.report=false", "logging.tensorboard=false",  # no test here reads them
]  # fmt: skip


def test_every_profile_has_a_machine():
    assert set(list_profiles()) == set(MACHINE)


@pytest.mark.parametrize("name", sorted(MACHINE))
def test_template_is_complete_and_validates_on_the_profiles_machine(name, tmp_path):
    text = render_template(name)
    path = tmp_path / "my.yaml"
    path.write_text(text, encoding="utf-8")
    platform = detect(load_fixture(FIXTURES / MACHINE[name]))
    resolved = validate(path, platform=platform)
    assert resolved.profile.name == name
    assert yaml.safe_load(text)["profile"] == name
    # Every field of the recipe is in the file, active or commented out, under a comment.
    for dotted in leaf_paths(RunConfig):
        section, _, field = dotted.partition(".")
        if section not in SECTIONS:
            continue
        assert re.search(rf"^  (# )?{field}: ", text, re.MULTILINE), dotted
    # The profile's own settings are shown, commented out, and still come from the profile.
    for section, values in load_profile(name).settings.items():
        for field in values if section != "hardware" else ():
            assert re.search(rf"^  # {field}: .*set by profile {name}$", text, re.MULTILINE)
            assert resolved.sources[f"{section}.{field}"] == f"profile {name}"
    description = RunConfig.model_fields["optimizer"].annotation.model_fields["learning_rate"]
    assert f"# {description.description}" in text


@pytest.mark.parametrize("name", sorted(MACHINE))
def test_template_trains_three_steps_on_cpu(name, tmp_path, monkeypatch, capsys):
    path = tmp_path / "my.yaml"
    code, out, err = run_in_process(monkeypatch, capsys, "profiles", "template", name,
                                    "-o", str(path))  # fmt: skip
    assert code == 0 and path.is_file(), err
    sets = [*ON_CPU, f"output.dir={tmp_path / 'runs'}"]
    args = [a for s in sets for a in ("--set", s)]
    code, out, err = run_in_process(monkeypatch, capsys, "train", str(path), *args)
    assert code == 0, err
    assert "done: finished after 3 steps" in out
    assert f"profile: {name} (named in the run config)" in out


def test_template_refuses_to_overwrite(tmp_path, monkeypatch, capsys):
    path = tmp_path / "my.yaml"
    path.write_text("keep me\n")
    code, _, err = run_in_process(monkeypatch, capsys, "profiles", "template", "cpu",
                                  "-o", str(path))  # fmt: skip
    assert code == 2 and "already exists" in err and path.read_text() == "keep me\n"


def test_a_profile_written_to_a_file_is_accepted_by_profile(tmp_path, monkeypatch, capsys):
    code, shown, _ = run_in_process(monkeypatch, capsys, "profiles", "show", "cpu")
    assert code == 0
    mine = tmp_path / "my_profile.yaml"
    mine.write_text(shown.replace("telemetry_interval_s: 5", "telemetry_interval_s: 7"))
    resolved = validate(None, platform=detect(load_fixture(FIXTURES / "cpu")), profile=str(mine))
    assert resolved.config.hardware.telemetry_interval_s == 7
    assert resolved.sources["hardware.telemetry_interval_s"] == f"profile {mine}"
    code, out, _ = run_in_process(monkeypatch, capsys, "profiles", "template", str(mine))
    assert code == 0 and f'profile: "{mine}"' in out


def test_a_run_config_is_not_a_profile(tmp_path, monkeypatch, capsys):
    code, _, err = run_in_process(monkeypatch, capsys, "validate",
                                  str(REPO / "config/vit_digits.yaml"), "--profile",
                                  str(REPO / "config/vit_digits.yaml"))  # fmt: skip
    assert code == 2 and "a run config is not a profile" in err
    code, _, err = run_in_process(monkeypatch, capsys, "validate",
                                  str(REPO / "config/vit_digits.yaml"), "--profile",
                                  str(tmp_path / "missing.yaml"))  # fmt: skip
    assert code == 2 and "not found" in err and len(err.strip().splitlines()) == 1
