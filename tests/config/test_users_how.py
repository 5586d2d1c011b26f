"""The user's "how" is kept: a micro-batch the run config sets itself is a cap that a
profile may lower but never raise, and the learning rate is scaled only against a batch the
user's config states. `config show` says which rule decided each."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.fakes.in_process import run_in_process
from tests.fakes.plans import plan_for

from trainforge.config import validate
from trainforge.hardware import detect, load_fixture
from trainforge.profiles import list_profiles

REPO = Path(__file__).resolve().parents[2]
CPU = detect(load_fixture(REPO / "tests" / "hardware" / "fixtures" / "cpu"))
GUIDE_JSON = REPO / "config" / "jetson_training.json"
G2P = REPO / "config" / "g2p_cmudict.yaml"


def split(resolved) -> tuple[int, int, int]:
    t = resolved.config.training
    return t.per_device_train_batch_size, t.gradient_accumulation_steps, t.global_batch_size


def shown(out: str) -> dict[str, tuple[str, str]]:
    """`config show`'s field lines: path -> (value, source)."""
    fields = {}
    for line in out.splitlines():
        if not line.startswith("#") and "  # " in line:
            left, source = line.rsplit("  # ", 1)
            path, _, value = left.partition(" ")
            fields[path] = (value.strip(), source)
    return fields


# ------------------------------------------------------------------ the micro-batch cap
def test_config_show_keeps_the_jetson_guides_1_x_4_on_the_jetson_profile(monkeypatch, capsys):
    """The Jetson guide asks for batch 1 with 4 accumulation steps "so the GPU memory stays
    under control"; the jetson-orin profile's cap of 16 used to make it 4 x 1."""
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", "config/jetson_training.json",
        "--profile", "jetson-orin",
    )  # fmt: skip
    assert code == 0, err
    fields = shown(out)
    assert fields["training.per_device_train_batch_size"] == (
        "1",
        "file config/jetson_training.json",
    )
    assert fields["training.gradient_accumulation_steps"][0] == "4"
    assert fields["training.global_batch_size"][0] == "4"
    rule = (
        "# rule: micro-batch at most 1: the run config's own micro-batch 1 (file "
        "config/jetson_training.json); hardware.micro_batch_size 16 (profile jetson-orin) may "
        "lower it, never raise it"
    )
    assert rule in out.splitlines()


def test_a_run_on_the_recorded_orin_plans_the_guides_1_x_4():
    """What `train config/jetson_training.json` plans on a Jetson: profile auto picks
    jetson-orin from the recorded board, and the plan keeps the guide's micro-batch."""
    orin = detect(load_fixture(REPO / "tests" / "hardware" / "fixtures" / "jetson-orin-jp6"))
    resolved = validate(GUIDE_JSON, platform=orin)
    assert resolved.profile.name == "jetson-orin"
    assert resolved.config.training.device == "cuda"
    assert split(resolved) == (1, 4, 4)


@pytest.mark.parametrize("profile", list_profiles())
@pytest.mark.parametrize("world", [1, 2])
def test_no_profile_raises_the_jetson_guides_micro_batch(profile, world):
    micro, accumulation, batch = split(plan_for(GUIDE_JSON, profile, world))
    assert micro == 1 and batch == 4 and accumulation * world == 4


def test_a_profile_lowers_the_users_micro_batch_and_says_so():
    resolved = plan_for(REPO / "config" / "vit_digits.yaml", "jetson-orin")
    assert split(resolved) == (16, 4, 64)
    assert (
        "micro-batch at most 16: hardware.micro_batch_size 16 (profile jetson-orin) lowers the "
        "run config's own micro-batch 64 (file " in resolved.rules[0]
    )


def test_a_micro_batch_from_a_flag_is_a_cap_too():
    # --batch_size 2 on the guide's 4 accumulation steps: 2 x 4, not 8 x 1 under the cap 16
    assert split(plan_for(GUIDE_JSON, "jetson-orin", 1, "--batch_size", "2")) == (2, 4, 8)
    # a larger hardware cap, even the user's own, does not raise it either
    raised = plan_for(GUIDE_JSON, "cpu", 1, "--set", "hardware.micro_batch_size=64")
    assert split(raised) == (1, 4, 4)
    # the user raises the micro-batch by saying so: the effective batch stays theirs
    asked = plan_for(
        GUIDE_JSON, "jetson-orin", 1, "--batch_size", "4", "--gradient_accumulation_steps", "1"
    )
    assert split(asked) == (4, 1, 4)


def test_without_a_micro_batch_of_the_users_the_profile_caps_the_default(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("training: {global_batch_size: 64}\n")
    resolved = plan_for(path, "jetson-orin")
    assert split(resolved) == (16, 4, 64)
    assert resolved.rules[0] == (
        "micro-batch at most 16: hardware.micro_batch_size 16 (profile jetson-orin)"
    )


def test_a_profiles_auto_probe_does_not_raise_the_users_micro_batch(tmp_path):
    profile = tmp_path / "probe.yaml"
    profile.write_text(
        "description: probes\nnotes: ''\nsettings:\n  hardware: {micro_batch_size: auto}\n"
    )
    resolved = plan_for(GUIDE_JSON, str(profile))
    assert split(resolved) == (1, 4, 4)
    assert "does not probe over it" in resolved.rules[0]
    # the user's own auto still probes
    probed = plan_for(GUIDE_JSON, "cpu", 1, "--set", "hardware.micro_batch_size=auto")
    assert probed.config.training.per_device_train_batch_size == "auto"
    assert probed.config.training.global_batch_size == 4


# ------------------------------------------------------------------ the rate's reference
def test_a_batch_flag_on_the_g2p_config_prints_no_scaling(monkeypatch, capsys):
    """The G2P config states no batch: 2e-3 is meant for no batch in particular, so
    `--batch_size 2` keeps it (it used to be scaled 64x down, against the schema's 128)."""
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", "config/g2p_cmudict.yaml", "--profile", "cpu",
        "--batch_size", "2",
    )  # fmt: skip
    assert code == 0, err
    assert (
        "learning rate: " not in out
        and "scaling" not in shown(out).get("optimizer.learning_rate", ("", ""))[1]
    )
    assert shown(out)["optimizer.learning_rate"] == ("0.002", "file config/g2p_cmudict.yaml")
    assert (
        "# rule: learning rate not scaled: the run config states no batch it was tuned for "
        "(set optimizer.reference_batch_size to scale it)"
    ) in out.splitlines()


def test_a_stated_reference_batch_scales_the_g2p_rate(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", "config/g2p_cmudict.yaml", "--profile", "cpu",
        "--batch_size", "2", "--set", "optimizer.reference_batch_size=128",
    )  # fmt: skip
    assert code == 0, err
    assert (
        "# learning rate: 0.002 for effective batch 128 -> 3.125e-05 for effective batch 2" in out
    )
    assert shown(out)["optimizer.learning_rate"] == ("3.125e-05", "lr scaling (linear)")
    assert (
        "# rule: learning rate scaled (linear): reference batch 128 "
        "(optimizer.reference_batch_size, flag --set optimizer.reference_batch_size) -> "
        "effective batch 2"
    ) in out.splitlines()


def test_the_run_configs_own_batch_is_the_reference(tmp_path):
    path = tmp_path / "g2p.yaml"
    text = G2P.read_text()
    assert "\ntraining:\n" in text
    path.write_text(
        text.replace("\ntraining:\n", "\ntraining:\n  per_device_train_batch_size: 64\n")
    )
    resolved = plan_for(path, "cpu", 1, "--batch_size", "2")
    assert resolved.config.optimizer.learning_rate == pytest.approx(2e-3 * 2 / 64)
    assert resolved.rules[1] == (
        f"learning rate scaled (linear): reference batch 64 (the run config's own batch, "
        f"file {path}) -> effective batch 2"
    )
    same = plan_for(path, "jetson-orin", 2)
    assert same.config.optimizer.learning_rate == 2e-3
    assert same.rules[1].startswith("learning rate not scaled: effective batch 64 is the ref")


def test_accumulation_alone_states_no_batch(tmp_path):
    """A file with only gradient_accumulation_steps runs the schema's default micro-batch:
    no batch the rate was tuned for, so a changed batch keeps the rate."""
    path = tmp_path / "run.yaml"
    path.write_text(
        "training: {gradient_accumulation_steps: 4}\noptimizer: {learning_rate: 0.01}\n"
    )
    resolved = plan_for(path, "cpu", 1, "--batch_size", "8")
    assert resolved.config.optimizer.learning_rate == 0.01
    assert not any(n.startswith("learning rate") for n in resolved.notes)


def test_a_rate_given_on_the_command_line_is_kept_and_said(tmp_path):
    resolved = plan_for(
        REPO / "config" / "vit_digits.yaml", "cpu", 1, "--batch_size", "32",
        "--learning_rate", "0.003",
    )  # fmt: skip
    assert resolved.config.optimizer.learning_rate == 0.003
    assert resolved.rules[1].startswith("learning rate not scaled: given on the command line")
