"""A normal run prints only trainforge's own lines. Each run here captures stdout and stderr of
the real `trainforge train` and fails on any line that does not match ALLOWED: a new
third-party warning, progress bar or log line shows up as a failure naming the line.
Each run is a child process: a library's notice comes once per process, at its first import,
and some are written below Python's sys.stderr; the process's own output is what is tested."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trainforge.observe import quiet

REPO = Path(__file__).resolve().parents[2]
# Every line trainforge itself prints during these runs.
ALLOWED = [
    r"platform: \S+ \(.*\)   profile: .+",
    r"task: \S+   data: .+ training samples\)   model: .+ parameters",
    r"device: \S+   precision: \w+   batch: .+ steps: \d+ \(\d+/epoch\)",
    r"distributed: \d+ processes, backend \w+, .+",
    r"run folder: .+",
    r"recipe: effective batch \d+ \(.+\)   learning rate .+ \(.+\)   precision \w+ \(.+\)",
    r"cpu threads: \d+ \(.+\)",
    r"learning rate: .+ \(linear scaling; .+\)",
    r"schedule: warmup of .+ does not fit the \d+-step run; shortened to \d+ \(a tenth .+\)",
    r"epoch \d+/\d+  step \d+/\d+  .*lr \d\.\d\de[+-]\d\d.*",
    r"epoch \d+/\d+  step \d+/\d+  \| val .+",
    r"creating base model .+: random \w+ \w+, tokenizer trained on .+",
    r"(train|val|test): \d+ records -> \d+ examples, .+",
    r"model: .+ \([\d,]+ parameters, [\d,]+ trained\)",
    r"W&B: (offline|online) run .+ in .+",
    r"W&B: upload the offline run with: wandb sync .+",
    r"Hugging Face model: .+",
    r"output model: .+",
    r"report: .+report\.html",
    r"done: finished after \d+ steps? in [\d.]+ s of training"
    r"( in all; (this segment \d+ steps? in [\d.]+ s|none in this segment))?",
    r"disk: checkpoints need about .+ \(\d+ kept at most x .+\)(, .+ free)?",
    r"warning: logging\.logging_steps=\d+ writes about [\d,]+ train records over [\d,]+ "
    r"steps( \(about .+ in .+\))?; .+",
    r"nothing to train: .+ is at step \d+ and training\.max_steps is \d+; .+",
    r"validation accuracy [\d.]+%  loss [\d.]+",
    r"test \(\d+ examples\): loss [\d.]+, .+",
    r"validation \(\d+ examples\): loss [\d.]+, .+",
    r"validation: (every .+|off)(; greedy-decodes \d+ of \d+ prompts .+)?",
    r".+: line \d+ \(.+\) is a header, not a record \(data\.header: \w+\)",
    r"base model .+ (was made from|is kept for the config's corpus) .+; "
    r"this run's corpus .+ is another, so it uses .+",
    r"checkpoints: .+",
    r"the tokenizer has no chat template: records are written with "
    r"data\.options\.prompt_template .+",
    r"batching: .+ \(data\.options\)",
    r"TensorBoard: tensorboard --logdir .+",
    r"metrics:     .+metrics\.jsonl",
    r"final model: .+model\.safetensors",
    r"profiler: \d+ steps after step \d+, top operators by .+:",
    r"profiler trace: .+\.pt\.trace\.json \(open in https://ui\.perfetto\.dev or TensorBoard\)",
    r"data: \d+ loader workers on \d+ usable CPU cores? can slow or stall loading; set "
    r"data\.dataloader_num_workers=\d+ or fewer \(0 loads in the training process\)",
]
# The profiler's top-operators table (torch's key_averages().table, printed by trainforge).
PROFILER_TABLE = [
    r"-+(  -+)*\s*",
    r"\s*Name(\s+(Self )?CPU[\w %]*|\s+# of Calls)+\s*",
    r".+?(\s+[\d.]+(%|us|ms|s)){5}\s+\d+\s*",
    r"Self CPU time total: [\d.]+(us|ms|s)",
    r"",
]
TINY_VIT = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "training.num_threads=1", "training.device=cpu", "hardware.telemetry=false",
]  # fmt: skip


def foreign_lines(text: str, also: list[str] | None = None) -> list[str]:
    patterns = [re.compile(p) for p in [*ALLOWED, *(also or [])]]
    return [ln for ln in text.splitlines() if not any(p.fullmatch(ln) for p in patterns)]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def run(args: list[str], tmp_path: Path, timeout: int = 600, **env_extra: str):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", HOME=str(home))
    env.update(env_extra)
    for name in (
        "WANDB_API_KEY",
        "WANDB_MODE",
        "WANDB_SILENT",
        "WANDB_QUIET",
        "MLFLOW_LOGGING_LEVEL",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "PYTHONWARNINGS",
        "KINETO_LOG_LEVEL",
    ):
        env.pop(name, None)  # fmt: skip
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_cpu_training_run_prints_only_its_own_lines_and_progress_in_the_first_epoch(tmp_path):
    """Not a terminal (captured); `progress_interval_s=0` stands for a long epoch: lines
    with steps/s and ETA before the first epoch ends, deterministically."""
    args = [sys.executable, "-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml"),
            "--profile", "cpu", *sets(*TINY_VIT, "training.max_steps=30",
            "logging.logging_steps=1000", "logging.progress_interval_s=0",
            "evaluation.eval_every_epochs=1", f"output.dir={tmp_path / 'runs'}")]  # fmt: skip
    done = run(args, tmp_path)
    assert foreign_lines(done.stdout + done.stderr) == []
    progress = [ln for ln in done.stdout.splitlines() if ln.startswith("epoch 1/2  step ")]
    steps = [int(re.search(r"step (\d+)/", ln).group(1)) for ln in progress]
    assert steps[:3] == [1, 2, 3]  # 23 steps per epoch: the first lines come long before
    assert all(re.search(r"steps/s  .*ETA \d+:\d\d:\d\d", ln) for ln in progress[:3])
    # Validation at the epoch's end shows once, on the line after it was measured; the run
    # stops at step 30, inside epoch 2, and closes with a validation of its last step.
    with_val = [ln for ln in done.stdout.splitlines() if "| val loss" in ln]
    assert [re.search(r"step (\d+)/30", ln).group(1) for ln in with_val] == ["23", "30"]
    assert all("val acc" in ln for ln in with_val)


def test_profiled_run_prints_the_window_not_kinetos_log(tmp_path):
    """`logging.profile_steps` on a CPU-only machine: the window's own lines and table, none
    of kineto's "USDT ... profiler_start" or "gpuGetDeviceCount failed" lines."""
    args = [sys.executable, "-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml"),
            "--profile", "cpu", *sets(*TINY_VIT, "training.max_steps=6",
            "logging.profile_steps=2", "logging.profile_wait_steps=1",
            f"output.dir={tmp_path / 'runs'}")]  # fmt: skip
    done = run(args, tmp_path)
    assert foreign_lines(done.stdout + done.stderr, PROFILER_TABLE) == []
    assert "profiler: 2 steps after step 1" in done.stdout
    assert "profiler trace: " in done.stdout and done.stderr == ""


def test_too_many_loader_workers_is_said_once_in_trainforges_words(tmp_path):
    """More workers than usable cores: torchdata warns twice with a site-packages path;
    trainforge says it once, with the setting to change."""
    cores = len(os.sched_getaffinity(0))
    workers = f"data.dataloader_num_workers={cores + 2}"
    args = [sys.executable, "-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml"),
            "--profile", "cpu", *sets(*TINY_VIT, "training.max_steps=3", workers,
            f"output.dir={tmp_path / 'runs'}")]  # fmt: skip
    done = run(args, tmp_path)
    assert foreign_lines(done.stdout + done.stderr) == []
    said = [ln for ln in done.stdout.splitlines() if "loader workers" in ln]
    assert said == [
        f"data: {cores + 2} loader workers on {cores} usable CPU core{'s' if cores > 1 else ''} "
        f"can slow or stall loading; set data.dataloader_num_workers={cores} or fewer (0 loads "
        "in the training process)"
    ]
    assert "UserWarning" not in done.stderr and "site-packages" not in done.stderr


@pytest.mark.slow  # creates a small Hugging Face model and decodes validation words
def test_causal_lm_run_with_trackers_prints_only_its_own_lines(tmp_path):
    lines = (REPO / "example_datasets/g2p/cmudict_train.tsv").read_text().splitlines()
    (tmp_path / "train.tsv").write_text("\n".join(lines[:96]) + "\n")
    (tmp_path / "val.tsv").write_text("\n".join(lines[-16:]) + "\n")
    (tmp_path / "test.tsv").write_text("\n".join(lines[-32:-16]) + "\n")
    args = [sys.executable, "-m", "trainforge", "train", str(REPO / "config/g2p_cmudict.yaml"),
            "--profile", "cpu", *sets(
                f"model.model_name_or_path={tmp_path / 'models/tiny'}", "model.init_size=tiny",
                "data.options.train_file=train.tsv", "data.options.validation_file=val.tsv",
                "data.options.test_file=test.tsv", "training.max_steps=4",
                "schedule.warmup_steps=1", "training.per_device_train_batch_size=16",
                "logging.logging_steps=2",
                "evaluation.eval_steps=2", "checkpoint.save_steps=2",
                "task.max_new_tokens=4", "training.gradient_checkpointing=true",
                "logging.mlflow=true", "logging.wandb=true", "training.num_threads=1",
                f"output.dir={tmp_path / 'runs'}", f"output.models_dir={tmp_path / 'models'}",
            )]  # fmt: skip
    done = run(args, tmp_path, WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"))
    assert foreign_lines(done.stdout + done.stderr) == []
    assert re.search(r"\| val loss .+val per [\d.]+%  val wer [\d.]+%", done.stdout)
    assert re.search(
        r"^test \(16 examples\): loss [\d.]+, .*per [\d.]+, wer [\d.]+$", done.stdout, re.M
    )


@pytest.mark.dist
def test_two_process_torchrun_prints_only_its_own_lines(tmp_path):
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            "-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml"), "--profile", "cpu",
            *sets(*TINY_VIT, "training.max_steps=6", "logging.logging_steps=2",
                  f"output.dir={tmp_path / 'runs'}")]  # fmt: skip
    done = run(args, tmp_path)
    assert foreign_lines(done.stdout + done.stderr) == []
    assert "distributed: 2 processes" in done.stdout


def test_filters_are_narrow():
    """The known messages from their own modules are ignored; the same text from anywhere
    else, and any other warning, still shows."""
    quiet._installed = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.install(env={"MLFLOW_LOGGING_LEVEL": "INFO", "HF_HUB_DISABLE_PROGRESS_BARS": "0"})
        for message, category, module in (
            ("'set_vital' is deprecated, please do not call", UserWarning,
             "torchdata.stateful_dataloader.stateful_dataloader"),
            ("Grad strides do not match bucket view strides. This may ...", UserWarning,
             "torch.autograd.graph"),
            ("`is_gradient_checkpointing` is deprecated and will be removed in v6.",
             FutureWarning, "transformers.modeling_utils"),
            ("TensorFloat32 tensor cores for float32 matrix multiplication available but not "
             "enabled.", UserWarning, "torch._inductor.compile_fx"),
            ("'set_vital' is deprecated, please do not call", UserWarning, "mypackage.loader"),
            ("something else is deprecated", UserWarning, "torchdata.loader"),
        ):  # fmt: skip
            warnings.warn_explicit(message, category, "x.py", 1, module=module)
    quiet._installed = False
    shown = [(str(w.message), w.category) for w in caught]
    assert shown == [
        ("'set_vital' is deprecated, please do not call", UserWarning),
        ("something else is deprecated", UserWarning),
    ]


def test_hugging_face_bars_off_when_first_imported_and_the_user_variable_wins():
    code = (
        "from trainforge.observe.quiet import install; install(); "
        "import huggingface_hub.utils as u; print(u.are_progress_bars_disabled())"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert off.stdout.strip() == "True" and off.stderr == ""
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "0"  # the user asked for bars
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert on.stdout.strip() == "False" and on.stderr == ""


def test_transformers_imported_before_the_install_loses_its_bars_too():
    """transformers reads huggingface_hub's switch once, at import: a process that imported
    it first (a test's model fixture, a notebook) printed "Loading weights" bars."""
    code = (
        "import transformers.utils.logging as t; before = t.is_progress_bar_enabled(); "
        "from trainforge.observe.quiet import install; install(); "
        "print(before, t.is_progress_bar_enabled())"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr


def test_checkpointing_a_hugging_face_model_warns_nothing(tiny_gpt2):
    """Fixed at the cause: the renamed transformers 5 call, not a filter."""
    from trainforge.models.hf import enable_checkpointing, load_causal_lm

    model = load_causal_lm(tiny_gpt2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enable_checkpointing(model)
    assert [str(w.message) for w in caught] == []
    assert model.is_activation_checkpointing
