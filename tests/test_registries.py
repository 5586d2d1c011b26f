"""Contract tests of the registries: one per extension kind, plus what every registry owes.

Every registry is keyed by the string the config uses, and the schema, the web dialog, the
docs and the commands read it: these tests check that the entries carry what their readers
need, that every built-in name validates, that the docs list it, and that an unknown name is
one line with a did-you-mean suggestion.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from trainforge.config import load, validate
from trainforge.config.checks import image_shape
from trainforge.config.errors import ConfigError
from trainforge.config.schema import LoggingConfig, RunConfig
from trainforge.errors import UserError
from trainforge.registry import (
    DATASETS,
    EXPORT_FORMATS,
    LOGGERS,
    PROFILES,
    TASKS,
    all_registries,
    load_object,
)

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"
FIXTURES = REPO / "tests" / "hardware" / "fixtures"
REGISTRIES = all_registries()
BASE = ["logging.tensorboard=false", "logging.jsonl=false", "logging.progress_bar=false"]


def config(*sets: str):
    return load(None, overrides=[*BASE, *sets], profile="cpu").config


def config_error(*sets: str) -> str:
    with pytest.raises(ConfigError) as caught:
        config(*sets)
    line = str(caught.value)
    assert "\n" not in line
    return line


# --- every registry -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_builtins_load_without_importing_torch(kind):
    code = (
        "import json, sys; from trainforge.registry import all_registries; "
        f"names = all_registries()[{kind!r}].names(); "
        "print(json.dumps({'names': names, 'torch': 'torch' in sys.modules}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["names"], f"no built-in {kind} is registered"
    assert not seen["torch"], f"registering the built-in {kind}s imported torch"


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_registry_names_its_config_key_and_builtins(kind):
    registry = REGISTRIES[kind]
    assert registry.kind == kind and registry.config_key
    assert registry._builtins, "built-ins come from a named module"
    names = registry.names()
    assert len(names) == len(set(names))


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_docs_list_every_name(kind):
    text = DOC.read_text(encoding="utf-8")
    for name in REGISTRIES[kind].names():
        assert f"- `{name}`" in text, f"docs/configuration.md lacks {kind} {name}"


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_an_unknown_name_is_one_line_with_a_suggestion(kind):
    registry = REGISTRIES[kind]
    names = registry.names()
    assert names, f"no built-in {kind} is registered"
    typo = names[0] + "z"
    with pytest.raises(UserError) as caught:
        registry.get(typo)
    line = caught.value.line()
    assert "\n" not in line
    assert registry.config_key in line and repr(typo) in line
    assert f"did you mean {names[0]!r}" in line


def test_load_object_imports_a_named_attribute_and_passes_others_through():
    assert load_object("json:dumps") is json.dumps
    assert load_object(json.dumps) is json.dumps


# --- datasets -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", DATASETS.names())
def test_dataset_entry_carries_shape_augmentation_and_loader(name):
    from trainforge.data.catalog import DatasetEntry

    entry = DATASETS.get(name)
    assert isinstance(entry, DatasetEntry) and entry.description
    assert entry.task in TASKS
    if entry.image:
        assert entry.load is not None and callable(load_object(entry.load))
        assert entry.channels in (1, 3)
        augment = entry.augment
        assert augment is not None
        assert len(augment.mean) == len(augment.std) == entry.channels
        assert all(s > 0 for s in augment.std) and augment.crop_padding_px >= 0


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_dataset_validates_with_its_task(name):
    entry = DATASETS.get(name)
    sets = [f"data.dataset={name}", f"task.kind={entry.task}"]
    if entry.task == "causal-lm":
        sets += ["model.arch=hf", "data.train_file=records.jsonl"]
    c = config(*sets)
    assert c.data.dataset == name
    if entry.image:
        side = entry.image_size or 32
        assert image_shape(c) == (side, entry.channels)


def test_an_unknown_dataset_is_one_config_error_with_the_known_names():
    line = config_error("data.dataset=digitz")
    assert "data.dataset" in line and "'digitz'" in line and "did you mean 'digits'" in line
    assert all(name in line for name in DATASETS.names())


def test_a_fixed_size_dataset_refuses_another_image_size():
    with pytest.raises(ConfigError) as caught:
        validate(None, overrides=[*BASE, "data.dataset=digits", "data.image_size=16"])
    line = str(caught.value)
    assert "digits images are 8x8" in line and "image-folder only" in line


def test_digits_load_as_its_entry_says():
    from trainforge.data import build_image_data

    c = config("data.dataset=digits")
    data = build_image_data(c.data, batch_size=8, eval_batch_size=8, seed=0)
    entry = DATASETS.get("digits")
    assert (data.channels, data.image_size, data.num_classes) == (
        entry.channels,
        entry.image_size,
        entry.num_classes,
    )
    assert tuple(data.augment.mean.flatten().tolist()) == pytest.approx(entry.augment.mean)


def test_the_web_dialog_offers_the_registered_image_datasets_and_tasks(tmp_path):
    from fastapi.testclient import TestClient

    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    with TestClient(create_app(WebSettings(root=tmp_path))) as client:
        choices = client.get("/api/train/defaults").json()["choices"]
    assert choices["image_datasets"] == [n for n in DATASETS.names() if DATASETS.get(n).image]
    assert "text" not in choices["image_datasets"] and "cifar10" in choices["image_datasets"]
    assert choices["tasks"] == TASKS.names()


# --- tasks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TASKS.names())
def test_task_entry_builds_and_names_its_export_kind(name):
    from trainforge.export.kinds import formats_of, kind_class

    entry = TASKS.get(name)
    assert entry.description and callable(load_object(entry.build))
    cls = kind_class(name, source="test")
    assert cls.kind == name
    assert set(formats_of(cls)) <= set(EXPORT_FORMATS.names()) and formats_of(cls)


def test_an_unknown_task_is_one_config_error():
    line = config_error("task.kind=image-clasification")
    assert "task.kind" in line and "did you mean 'image-classification'" in line


# --- loggers --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOGGERS.names())
def test_logger_entry_has_a_factory_and_a_real_switch(name):
    entry = LOGGERS.get(name)
    switches = {f for f, info in LoggingConfig.model_fields.items() if info.annotation is bool}
    assert entry.description and callable(entry.factory)
    assert entry.switch is None or entry.switch in switches
    assert entry.on_missing in ("skip", "stop")
    assert config(f"logging.loggers=[{name}]").logging.loggers == [name]


def test_an_unknown_logger_is_one_config_error():
    line = config_error("logging.loggers=[tensorbord]")
    assert "logging.loggers" in line and "did you mean 'tensorboard'" in line


def test_loggers_follow_switches_and_names_in_registration_order(tmp_path):
    from trainforge.observe.loggers import JsonlLogger, TensorBoardLogger, build_loggers

    cfg = config("logging.jsonl=true", "logging.loggers=[tensorboard]").logging
    loggers = build_loggers(cfg, tmp_path, "run")
    try:
        assert [type(x) for x in loggers] == [JsonlLogger, TensorBoardLogger]
    finally:
        for x in loggers:
            x.close()
    assert build_loggers(config().logging, tmp_path, "run") == []


# --- export formats -------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXPORT_FORMATS.names())
def test_export_format_has_a_writer_and_loadable_runtimes(name):
    from trainforge.export.formats import ExportFormat

    entry = EXPORT_FORMATS.get(name)
    assert isinstance(entry, ExportFormat) and entry.description
    assert callable(entry.writer())
    assert entry.runtimes, "its artifacts run somewhere"
    assert all(callable(load_object(loader)) for loader in entry.runtimes.values())


def test_export_choices_come_from_the_registry():
    from trainforge.export.cli import FORMAT_CHOICES
    from trainforge.export.options import check_formats

    assert check_formats(["all"]) == EXPORT_FORMATS.names()
    assert ", ".join(EXPORT_FORMATS.names()) == FORMAT_CHOICES
    with pytest.raises(UserError) as caught:
        check_formats(["onxx"])
    line = caught.value.line()
    assert "\n" not in line and "did you mean 'onnx'" in line


def test_every_summary_runtime_has_a_registered_predictor():
    from trainforge.export.formats import predictor_loader, runtime_names

    assert {"onnxruntime", "torch", "torch-int8"} <= set(runtime_names())
    assert predictor_loader("transformers") is None  # loaded with transformers itself


# --- profiles -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES.names())
def test_profile_entry_loads_with_detect_rules(name):
    from trainforge.hardware.detect import _facts, detect

    profile = PROFILES.get(name).profile
    assert profile.name == name and profile.description
    assert profile.detect, f"{name} says when profile: auto picks it"
    facts = _facts(detect())
    for rule in profile.detect:
        assert rule.reason.format(**facts)
    assert RunConfig(profile=name).profile == name


def test_rule_ranks_are_unique_and_one_rule_catches_everything():
    rules = [r for n in PROFILES.names() for r in PROFILES.get(n).profile.detect]
    assert len({r.rank for r in rules}) == len(rules)
    catch_all = [
        r
        for r in rules
        if not (r.platform or r.gpu_name_any)
        and r.jetson_orin is None
        and r.slurm is None
        and r.min_gpu_memory_gib is None
    ]
    assert len(catch_all) == 1 and catch_all[0].rank == max(r.rank for r in rules)


def _platforms():
    from trainforge.hardware import GpuInfo, Probe, SlurmInfo, detect, load_fixture

    out = [
        detect(load_fixture(p)) for p in sorted(FIXTURES.iterdir()) if (p / "probe.json").is_file()
    ]
    for name, gib in [
        ("NVIDIA H100 80GB HBM3", 79.6),
        ("NVIDIA GeForce RTX 3090", 24.0),
        ("NVIDIA RTX A6000", 48.0),
        ("NVIDIA L40S", 45.0),
        ("Tesla V100-SXM2-16GB", 16.0),
        ("Some Future Accelerator", 96.0),
        ("NVIDIA GB10", 0.0),
    ]:
        probe = Probe(env={}, machine="x86_64", system="linux", cpu_count=4)
        platform = detect(replace(probe, gpus=(GpuInfo(0, name, gib, (8, 0)),)))
        out += [platform, replace(platform, slurm=SlurmInfo("42", 1, 1, 2, 0, "gpu", "n1"))]
    out.append(detect(Probe(env={}, machine="arm64", system="darwin", gpus=(), mps_available=True)))
    out.append(detect(Probe(env={"SLURM_JOB_ID": "9"}, machine="x86_64", system="linux", gpus=())))
    jp6 = detect(load_fixture(FIXTURES / "jetson-orin-jp6"))
    out.append(replace(jp6, jetson=replace(jp6.jetson, model="NVIDIA Jetson Xavier NX")))
    return out


# What the detection picked, with its reason, for each of `_platforms()` before the rules moved
# into the profiles (recorded from the hand-written branches they replaced).
PICKED_BEFORE = [
    ("cpu", "no CUDA GPU (NVML found none) and no Apple MPS: running on CPU"),
    ("workstation-24gb", "1x NVIDIA GeForce RTX 4090: consumer/workstation GPUs"),
    ("dgx-spark", "NVIDIA GB10 on aarch64 with 119 GiB unified memory (DGX Spark)"),
    (
        "jetson-orin",
        "Jetson board NVIDIA Jetson AGX Orin Developer Kit with JetPack 5.1.2 (L4T 35.4.1)",
    ),
    (
        "jetson-orin",
        "Jetson board NVIDIA Jetson Orin Nano Developer Kit with JetPack 6.0 (L4T 36.3.0)",
    ),
    ("hpc-a100", "4x NVIDIA A100-SXM4-80GB: data-centre GPUs"),
    ("hpc-a100", "1x NVIDIA H100 80GB HBM3: data-centre GPUs"),
    ("hpc-a100", "1x NVIDIA H100 80GB HBM3: data-centre GPUs"),
    ("workstation-24gb", "1x NVIDIA GeForce RTX 3090: consumer/workstation GPUs"),
    ("hpc-a100", "1x NVIDIA GeForce RTX 3090 inside Slurm job 42: cluster GPU allocation"),
    ("workstation-24gb", "1x NVIDIA RTX A6000: consumer/workstation GPUs"),
    ("hpc-a100", "1x NVIDIA RTX A6000 inside Slurm job 42: cluster GPU allocation"),
    ("workstation-24gb", "1x NVIDIA L40S: consumer/workstation GPUs"),
    ("hpc-a100", "1x NVIDIA L40S inside Slurm job 42: cluster GPU allocation"),
    ("workstation-24gb", "1x Tesla V100-SXM2-16GB: under 40 GiB per GPU, workstation class"),
    ("hpc-a100", "1x Tesla V100-SXM2-16GB inside Slurm job 42: cluster GPU allocation"),
    ("hpc-a100", "1x Some Future Accelerator: 96 GiB per GPU, data-centre class"),
    ("hpc-a100", "1x Some Future Accelerator inside Slurm job 42: cluster GPU allocation"),
    ("workstation-24gb", "1x NVIDIA GB10: under 40 GiB per GPU, workstation class"),
    ("hpc-a100", "1x NVIDIA GB10 inside Slurm job 42: cluster GPU allocation"),
    ("cpu", "Apple MPS: no Apple-specific profile yet; the cpu profile's settings are safe"),
    ("cpu", "no CUDA GPU (NVML found none) and no Apple MPS: running on CPU"),
    (
        "jetson-orin",
        "Jetson board NVIDIA Jetson Xavier NX with JetPack 6.0 (L4T 36.3.0) is not an Orin; "
        "jetson-orin is the nearest built-in profile",
    ),
]


def test_profile_rules_pick_what_the_detection_always_picked():
    from trainforge.hardware import pick_profile
    from trainforge.hardware.detect import profile_for

    platforms = _platforms()
    assert any(p.jetson is not None and not p.jetson.is_orin for p in platforms)
    assert [profile_for(p) for p in platforms] == PICKED_BEFORE
    assert [pick_profile(p) for p in platforms] == PICKED_BEFORE


def test_a_registered_profile_brings_its_own_rule(tmp_path):
    from trainforge.hardware import detect, load_fixture
    from trainforge.hardware.detect import profile_for
    from trainforge.profiles import ProfileEntry, load_profile

    path = tmp_path / "orin-nano.yaml"
    path.write_text(
        "description: Orin Nano\n"
        "detect:\n"
        "  - rank: 5\n"
        "    platform: jetson\n"
        "    gpu_name_any: [Orin]\n"
        "    reason: '{jetson_model}: the nano profile'\n"
        "settings:\n  hardware:\n    micro_batch_size: 4\n"
    )
    PROFILES.register("orin-nano", ProfileEntry.from_file(path))
    try:
        platform = detect(load_fixture(FIXTURES / "jetson-orin-jp6"))
        name, reason = profile_for(platform)
        assert name == "orin-nano" and reason.endswith("the nano profile")
        assert load_profile("orin-nano").settings == {"hardware": {"micro_batch_size": 4}}
    finally:
        PROFILES.unregister("orin-nano")


def test_a_bad_detect_rule_is_one_user_error(tmp_path):
    from trainforge.profiles import load_profile

    path = tmp_path / "bad.yaml"
    path.write_text("description: x\ndetect:\n  - rank: 1\n    reason: r\n    gpu: [A]\n")
    with pytest.raises(UserError) as caught:
        load_profile(str(path))
    assert "\n" not in caught.value.line() and "unknown keys ['gpu']" in caught.value.line()


@pytest.mark.parametrize("on_missing", ["skip", "stop"])
def test_a_logger_whose_package_is_missing_is_skipped_or_one_line(on_missing, tmp_path, capsys):
    from trainforge.observe.loggers import LoggerEntry, build_loggers

    def factory(cfg, run_dir, run_name, resume_step):
        raise ImportError("no module named toytracker")

    LOGGERS.register("toytracker", LoggerEntry("a tracker", factory, None, "track", on_missing))
    try:
        cfg = config("logging.loggers=[toytracker]").logging
        if on_missing == "skip":
            assert build_loggers(cfg, tmp_path) == []
            assert "toytracker logging off" in capsys.readouterr().out
        else:
            with pytest.raises(UserError) as caught:
                build_loggers(cfg, tmp_path)
            line = caught.value.line()
            assert "\n" not in line and "logging.loggers has toytracker" in line
            assert "pip install 'trainforge[track]'" in line
    finally:
        LOGGERS.unregister("toytracker")
