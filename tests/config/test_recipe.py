"""The run config is the recipe; the hardware profile only decides how to run it.

Over every shipped run config x every shipped profile x 1, 2 and 3 processes: the effective
batch (samples per optimizer step) and the peak learning rate never change, the
micro-batch follows the profile, and `config show --profile X` works on this CPU machine.
The ViT training guide's own commands resolve to the guide's batch and rate everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.fakes.in_process import run_in_process
from tests.fakes.plans import plan_for

from trainforge.config import ConfigError, validate
from trainforge.config.plan import plan_accumulation
from trainforge.hardware import detect, load_fixture
from trainforge.profiles import list_profiles, load_profile

REPO = Path(__file__).resolve().parents[2]
CPU = detect(load_fixture(REPO / "tests" / "hardware" / "fixtures" / "cpu"))
CONFIGS = sorted((REPO / "config").glob("*.yaml")) + sorted((REPO / "config").glob("*.json"))
PROFILES = list_profiles()


def recipe(resolved) -> tuple[int, float]:
    t = resolved.config.training
    return t.global_batch_size, resolved.config.optimizer.learning_rate


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_profiles_and_process_counts_never_change_the_recipe(path):
    seen: dict[tuple[str, int], tuple[int, float]] = {}
    for profile in PROFILES:
        cap = (load_profile(profile).settings.get("hardware") or {}).get("micro_batch_size")
        for world in (1, 2, 3):
            resolved = plan_for(path, profile, world)
            t = resolved.config.training
            seen[(profile, world)] = recipe(resolved)
            # the profile's micro-batch cap is obeyed, and the slots hold the step with
            # micro-batches within one sample of each other
            if isinstance(cap, int):
                assert t.per_device_train_batch_size <= cap, (profile, world)
            slots = t.gradient_accumulation_steps * world
            assert t.per_device_train_batch_size * slots >= t.global_batch_size
            assert t.per_device_train_batch_size - t.global_batch_size // slots <= 1
            assert not any(n.startswith("batch:") for n in resolved.notes), resolved.notes
    assert len(set(seen.values())) == 1, seen


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_the_micro_batch_follows_the_profile(path):
    micro = {p: plan_for(path, p, 1).config.training for p in PROFILES}
    jetson, workstation = micro["jetson-orin"], micro["workstation-24gb"]
    # A Jetson's cap (16) is the smallest: it accumulates at least as much as a workstation.
    assert jetson.per_device_train_batch_size <= workstation.per_device_train_batch_size
    assert jetson.gradient_accumulation_steps >= workstation.gradient_accumulation_steps


def test_the_digits_demo_keeps_its_batch_and_rate_on_a_jetson():
    """The first round's bug: jetson-orin made the demo's 64 x 1 at 0.002 into 64 x 16 at
    0.032. The recipe stays 64 at 0.002; the Jetson runs it as 16 x 4."""
    resolved = plan_for(REPO / "config" / "vit_digits.yaml", "jetson-orin", 1)
    t = resolved.config.training
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (16, 4)
    assert recipe(resolved) == (64, 0.002)
    assert resolved.sources["training.gradient_accumulation_steps"].startswith("plan")


GUIDE = REPO / "config" / "vit_cifar10.yaml"
GUIDE_COMMANDS = {
    # the ViT training guide's "Custom Configuration", "Small Model", "Large Model"
    "custom": (
        ["--batch_size", "256", "--learning_rate", "5e-4", "--max_epochs", "200",
         "--max_training_hours", "48", "--embedding_dim", "384", "--num_layers", "12",
         "--num_heads", "6"],
        (256, 5e-4),
    ),
    "small": (
        ["--embedding_dim", "128", "--num_layers", "6", "--num_heads", "4", "--mlp_size",
         "512", "--batch_size", "256"],
        (256, 3e-4),
    ),
    "large": (
        ["--embedding_dim", "384", "--num_layers", "24", "--num_heads", "6", "--mlp_size",
         "1536", "--batch_size", "64"],
        (64, 3e-4),
    ),
    "basic": ([], (256, 3e-4)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GUIDE_COMMANDS))
@pytest.mark.parametrize("profile", PROFILES)
def test_the_vit_guides_commands_resolve_to_the_guides_batch_and_rate(name, profile):
    flags, expected = GUIDE_COMMANDS[name]
    for world in (1, 2):
        assert recipe(plan_for(GUIDE, profile, world, *flags)) == expected


@pytest.mark.parametrize(
    ("stem", "expected"),
    [("vit_cifar10_custom", (256, 5e-4)), ("vit_cifar10_small", (256, 3e-4)),
     ("vit_cifar10_large", (64, 3e-4))],
)  # fmt: skip
def test_the_shipped_guide_configs_are_the_guides_numbers(stem, expected):
    for profile in PROFILES:
        assert recipe(plan_for(REPO / "config" / f"{stem}.yaml", profile, 1)) == expected


def test_learning_rate_scaling_applies_only_when_the_command_line_changes_the_batch():
    digits = REPO / "config" / "vit_digits.yaml"  # 64 at 0.002, linear scaling
    same = plan_for(digits, "jetson-orin", 2, "--batch_size", "64")
    assert recipe(same) == (64, 0.002)
    assert not any(n.startswith("learning rate") for n in same.notes)
    half = plan_for(digits, "jetson-orin", 2, "--batch_size", "32")
    assert recipe(half) == (32, pytest.approx(0.001))
    assert any("learning rate: 0.002 for effective batch 64 -> 0.001" in n for n in half.notes)
    assert half.sources["optimizer.learning_rate"] == "lr scaling (linear)"
    # a rate given with the batch is taken as meant for it
    given = plan_for(digits, "cpu", 1, "--batch_size", "32", "--learning_rate", "0.003")
    assert recipe(given) == (32, 0.003)


def test_auto_batch_keeps_the_recipes_effective_batch():
    resolved = plan_for(
        REPO / "config" / "vit_digits.yaml", "jetson-orin", 2, "--batch_size", "auto"
    )
    t = resolved.config.training
    assert t.per_device_train_batch_size == "auto" and t.global_batch_size == 64
    assert resolved.config.optimizer.learning_rate == 0.002


@pytest.mark.parametrize("world", [1, 2, 3, 5, 7, 64])
def test_any_process_count_trains_the_recipes_batch_at_the_recipes_rate(world):
    resolved = plan_for(REPO / "config" / "vit_digits.yaml", "cpu", world)
    assert recipe(resolved) == (64, 0.002)
    assert not any(n.startswith(("batch:", "learning rate")) for n in resolved.notes)


def test_an_uneven_split_is_planned_silently_and_keeps_the_batch():
    resolved = plan_for(REPO / "config" / "vit_digits.yaml", "jetson-orin", 2, "--batch_size", "33")
    t = resolved.config.training
    # 33 over 2 processes under the Jetson's cap of 16: 2 micro-batches each, 9, 8, 8 and 8
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (9, 2)
    assert t.global_batch_size == 33 and not any(n.startswith("batch:") for n in resolved.notes)


@pytest.mark.parametrize(
    ("cap", "target", "world", "micro", "accumulation"),
    [(16, 64, 1, 16, 4), (16, 64, 2, 16, 2), (16, 33, 2, 9, 2), (128, 256, 2, 128, 1),
     (64, 1, 1, 1, 1), (16, 100, 3, 12, 3), (64, 64, 3, 22, 1), (64, 64, 5, 13, 1),
     (64, 64, 7, 10, 1), (1, 10, 4, 1, 3)],
)  # fmt: skip
def test_plan_accumulation_splits_the_step_within_one_sample(
    cap, target, world, micro, accumulation
):
    plan = plan_accumulation(cap, target, world)
    assert (plan.micro_batch, plan.accumulation) == (micro, accumulation)
    assert plan.global_batch == target  # always the recipe's batch
    assert plan.micro_batch * plan.accumulation * world >= target
    assert plan.micro_batch - target // (plan.accumulation * world) <= 1


@pytest.mark.parametrize(("batch", "world"), [(4, 8), (1, 2), (64, 65)])
def test_more_processes_than_samples_is_refused_in_one_line_naming_a_count(batch, world):
    with pytest.raises(ConfigError) as err:
        plan_for(REPO / "config" / "vit_digits.yaml", "cpu", world, "--batch_size", str(batch))
    line = str(err.value)
    assert "\n" not in line.strip(), line
    assert f"the effective batch {batch} cannot be split over {world} processes" in line
    assert f"--nproc-per-node {batch}" in line and f"global_batch_size to at least {world}" in line


def test_as_many_processes_as_samples_is_accepted():
    t = plan_for(REPO / "config" / "vit_digits.yaml", "cpu", 8, "--batch_size", "8").config.training
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (1, 1)


@pytest.mark.parametrize("profile", PROFILES)
def test_config_show_works_for_every_profile_on_this_cpu_machine(monkeypatch, capsys, profile):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", "config/g2p_cmudict.yaml", "--profile", profile,
        "--max_steps", "10", "--save_steps", "5",
    )  # fmt: skip
    assert code == 0, err
    assert f"# profile: {profile} (named by --profile)" in out
    assert "training.max_steps" in out and "# flag --max_steps" in out


def test_validate_judges_a_named_profile_on_its_hardware_and_train_this_machine(
    monkeypatch, capsys, tmp_path
):
    # fp16 is a GPU precision: fine for a Jetson profile checked on a laptop ...
    code, out, err = run_in_process(
        monkeypatch, capsys, "validate", "config/vit_digits.yaml", "--profile", "jetson-orin"
    )
    assert code == 0 and "OK config/vit_digits.yaml" in out, err
    # ... and says so, with what `train` would refuse here (one line, still exit 0) ...
    assert out.strip() == (
        "OK config/vit_digits.yaml for the jetson-orin profile's hardware; not on this "
        "machine: training.precision = 'fp16': needs a CUDA device, but this run uses cpu "
        "(this machine (cpu)); set training.precision=auto (fp32 on CPU) or bf16"
    ), out
    code, out, err = run_in_process(monkeypatch, capsys, "validate", "config/vit_digits.yaml")
    assert (code, out.strip()) == (0, "OK config/vit_digits.yaml"), err  # judged for here
    # ... while `train` judges the machine in hand, before anything is written.
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", "config/vit_digits.yaml", "--profile", "jetson-orin",
        "--output_dir", str(tmp_path),
    )  # fmt: skip
    assert code == 2 and "fp16" in err and not any(tmp_path.iterdir())
    with pytest.raises(ConfigError, match="fp16"):
        validate(REPO / "config" / "vit_digits.yaml", platform=CPU, profile="jetson-orin")


def test_a_key_error_does_not_hide_the_plan_behind_a_false_warmup_error(tmp_path):
    """One pass: the key error is reported, and the cross-field rules judge the config as it
    would run (the warmup shortened for the --max_steps given), so no false warmup error."""
    path = tmp_path / "g2p.yaml"
    path.write_text((REPO / "config" / "g2p_cmudict.yaml").read_text() + "trainng: {}\n")
    with pytest.raises(ConfigError) as err:
        plan_for(path, "cpu", 1, "--max_steps", "10")
    assert len(err.value.lines) == 1 and "trainng" in err.value.lines[0]


@pytest.mark.parametrize("command", [["train"], ["config", "show"]])
def test_a_stray_word_is_refused_not_ignored(monkeypatch, capsys, command):
    code, _, err = run_in_process(
        monkeypatch, capsys, *command, "config/vit_digits.yaml", "extra.yaml", "--max_steps", "3"
    )
    assert code == 2 and "unexpected argument 'extra.yaml'" in err and err.count("\n") == 1
