"""End to end through the `trainforge` command: the Jetson guide's flow on a tiny model made by
`models init`, the output folder loaded by transformers/peft, and the user errors."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

from fakes.tiny_lm import lm_overrides

REPO = Path(__file__).resolve().parents[2]
FAST = ["--profile", "cpu", "--set", "training.num_threads=1"]
# 8 optimizer steps (32 examples) with a validation at the last one.
SHORT = ["--set", "training.max_steps=8", "--set", "evaluation.eval_steps=8"]


def run_main(monkeypatch, capsys, cwd: Path, *args: str) -> tuple[int, str, str]:
    """`trainforge ARGS` in this process (saves a Python start-up; same entry point)."""
    from trainforge.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["trainforge", *args])
    with pytest.raises(SystemExit) as done:
        main()
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's project folder holding the shipped Jetson profile and data set."""
    (tmp_path / "config").mkdir()
    (tmp_path / "example_datasets").mkdir()
    shutil.copy(REPO / "config" / "jetson_training.json", tmp_path / "config")
    shutil.copy(REPO / "example_datasets" / "jetson_training.json", tmp_path / "example_datasets")
    return tmp_path


def test_jetson_profile_trains_end_to_end(project, cli, monkeypatch, capsys):
    code, out, err = run_main(
        monkeypatch, capsys, project, "models", "init", "tiny", "--arch", "gpt2",
        "--size", "tiny", "--corpus", "example_datasets/jetson_training.json",
    )  # fmt: skip
    assert code == 0 and "created models/tiny" in out, err
    train = ["train", "config/jetson_training.json", "--base-model", "models/tiny"]
    result = cli(*train, "--output-name", "jetson-tuned", *FAST, *SHORT, cwd=project)
    assert result.returncode == 0, result.stderr
    assert "batch: 1 x 4 accumulation = 4" in result.stdout
    assert "truncated to max_seq_length=512" in result.stdout
    assert (project / "outputs" / "jetson_training_swap").is_dir()  # created on demand
    out = project / "models" / "jetson-tuned"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    summary = json.loads((out / "trainforge.json").read_text())
    assert summary["base_model"] == "models/tiny"
    assert summary["dataset"]["train_file"] == "example_datasets/jetson_training.json"
    assert summary["dataset"]["splits"]["train"]["records"] > 200
    assert len(summary["config_hash"]) == 16 and summary["global_step"] == 8
    assert {"loss", "accuracy", "perplexity"} <= set(summary["metrics"])
    assert (project / "runs" / "jetson-tuned" / "model" / "config.json").is_file()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    ids = tokenizer("Where does the fine-tuned model go?\n", return_tensors="pt")
    generated = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] > ids["input_ids"].shape[1]

    code, out, err = run_main(monkeypatch, capsys, project, "models", "list")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert (
        "GPT2LMHeadModel" in rows["jetson-tuned"] and "(base: models/tiny)" in rows["jetson-tuned"]
    )
    assert "GPT2LMHeadModel" in rows["tiny"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "model.model_name_or_path=models/none"], "not a Hugging Face model folder"),
        (["--output-name", "../escape", "--base-model", "models/x"], "plain folder name"),
        ([], "pick a base model (--base-model models/NAME"),
        (["--output-name", "taken", "--base-model", "models/x"], "models/taken already exists"),
    ],
)
def test_user_errors_exit_2_without_traceback(project, monkeypatch, capsys, args, message):
    (project / "models" / "taken").mkdir(parents=True)
    train = ["train", "config/jetson_training.json", "--profile", "cpu"]
    code, out, err = run_main(monkeypatch, capsys, project, *train, *args)
    assert code == 2, out + err
    assert message in err and "Traceback" not in err
    # one line per problem, each naming the field or path (or the flag that set it)
    named = ("config/", "model", "output", "data", "--")
    assert all(line.startswith(named) for line in err.splitlines())
    assert not (project / "runs").exists()


def test_unknown_training_argument_names_the_nearest(project, monkeypatch, capsys):
    path = project / "config" / "jetson_training.json"
    data = json.loads(path.read_text())
    data["training_arguments"]["gradient_acumulation_steps"] = 8
    path.write_text(json.dumps(data))
    code, _, err = run_main(
        monkeypatch, capsys, project, "validate", str(path.relative_to(project))
    )
    assert code == 2
    assert "training_arguments.gradient_acumulation_steps: unknown training argument" in err
    assert "did you mean gradient_accumulation_steps?" in err


@pytest.mark.usefixtures("single_thread")
def test_lora_run_writes_an_adapter_that_peft_loads(tmp_path, tiny_llama_chat, lm_corpus):
    from peft import AutoPeftModelForCausalLM

    from trainforge.config import validate
    from trainforge.hardware import detect
    from trainforge.train import train

    sets = {
        "training.max_steps": 4,
        "lora.enabled": True,
        "lora.target_modules": "[q_proj, v_proj]",
        "output.dir": str(tmp_path / "runs"),
        "output.models_dir": str(tmp_path / "models"),
        "output.model_name": "tuned-adapter",
    }
    platform = detect()
    resolved = validate(
        None, platform=platform, profile="cpu",
        overrides=lm_overrides(tiny_llama_chat.resolve(), lm_corpus["chat"], **sets),
    )  # fmt: skip
    summary = train(resolved, platform)
    out = tmp_path / "models" / "tuned-adapter"
    assert (out / "adapter_config.json").is_file() and not (out / "model.safetensors").exists()
    assert json.loads((out / "trainforge.json").read_text())["lora"]["r"] == 8
    model = AutoPeftModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids = torch.tensor([[3, 4, 5]])
    assert model.generate(input_ids=ids, max_new_tokens=3, do_sample=False).shape[1] > 3
    assert summary.global_step == 4


def test_g2p_config_runs_end_to_end_with_per_and_wer(tmp_path, monkeypatch, capsys):
    """config/g2p_cmudict.yaml as shipped, on the first words of each split and a few steps:
    the config creates its base model (tiny here), validates with PER/WER, and the final
    model is scored on the test split."""
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "g2p_cmudict.yaml", tmp_path / "config")
    g2p = tmp_path / "example_datasets" / "g2p"
    g2p.mkdir(parents=True)
    for split, count in (("train", 400), ("val", 16), ("test", 16)):
        lines = (REPO / "example_datasets" / "g2p" / f"cmudict_{split}.tsv").read_text()
        (g2p / f"cmudict_{split}.tsv").write_text("".join(lines.splitlines(True)[:count]))
    shorten = {
        "model.init_size": "tiny",
        "training.max_steps": 6,
        "evaluation.eval_steps": 6,
        "schedule.warmup_steps": 2,
        "training.per_device_train_batch_size": 16,
        "evaluation.per_device_eval_batch_size": 16,
        "task.max_new_tokens": 12,
        "logging.tensorboard": "false",
    }
    sets = [arg for k, v in shorten.items() for arg in ("--set", f"{k}={v}")]
    code, out, err = run_main(
        monkeypatch, capsys, tmp_path, "train", "config/g2p_cmudict.yaml", *FAST, *sets
    )
    assert code == 0, out[-2000:] + err
    assert "creating base model models/g2p-small: random llama tiny" in out
    assert "test (16 examples): " in out
    (run_dir,) = (tmp_path / "runs").iterdir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    by_split = {r["split"]: r for r in records}
    for split in ("val", "test"):
        assert by_split[split]["per"] >= 0.0 and 0.0 <= by_split[split]["wer"] <= 1.0, split
    assert by_split["test"]["step"] == 6
    run_summary = json.loads((run_dir / "summary.json").read_text())
    final = run_summary["final_metrics"]
    assert final["per"] == by_split["val"]["per"] and final["wer"] == by_split["val"]["wer"]
    assert run_summary["test_metrics"]["per"] == by_split["test"]["per"]
    report = (run_dir / "report.html").read_text()
    assert "test (final model)" in report and "unreadable" not in report
    summary = json.loads((tmp_path / "models" / "g2p-cmudict" / "trainforge.json").read_text())
    assert {"per", "wer"} <= set(summary["metrics"])
    assert summary["test_metrics"]["per"] == by_split["test"]["per"]
    assert summary["dataset"]["splits"]["test"]["records"] == 16


TINY_RUN = ["--set", "training.max_steps=2", "--set", "evaluation.eval_steps=2"]


def test_output_name_is_replaced_only_with_overwrite(project, tiny_gpt2, monkeypatch, capsys):
    old = project / "models" / "tuned"
    old.mkdir(parents=True)
    (old / "config.json").write_text("{}")
    (old / "notes.txt").write_text("an older model")
    train = ["train", "config/jetson_training.json", "--base-model", str(tiny_gpt2),
             "--output-name", "tuned", *FAST, *TINY_RUN]  # fmt: skip
    code, _, err = run_main(monkeypatch, capsys, project, *train)
    (line,) = err.strip().splitlines()  # one line, no traceback
    assert code == 2 and "models/tuned already exists" in line and "--overwrite" in line
    assert sorted(p.name for p in old.iterdir()) == ["config.json", "notes.txt"]
    assert not (project / "runs").exists()

    code, _, err = run_main(monkeypatch, capsys, project, *train, "--overwrite")
    assert code == 0, err
    assert not (old / "notes.txt").exists()
    assert json.loads((old / "config.json").read_text())["model_type"] == "gpt2"
    assert json.loads((old / "trainforge.json").read_text())["global_step"] == 2
    assert {"model.safetensors", "tokenizer.json"} <= {p.name for p in old.iterdir()}
    assert [p.name for p in (project / "models").iterdir()] == ["tuned"]  # no staging left


def test_bf16_guide_profile_trains_on_cpu_and_writes_a_loadable_model(
    project, tiny_gpt2, monkeypatch, capsys
):
    path = project / "config" / "jetson_training.json"
    data = json.loads(path.read_text())
    data["training_arguments"]["bf16"] = True
    path.write_text(json.dumps(data))
    train = ["train", "config/jetson_training.json", "--base-model", str(tiny_gpt2),
             "--output-name", "tuned-bf16", *FAST, *TINY_RUN]  # fmt: skip
    code, out, err = run_main(monkeypatch, capsys, project, *train)
    assert code == 0, err
    assert "precision: bf16" in out
    (run_dir,) = (project / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["precision"] == "bf16" and summary["global_step"] == 2
    assert all(math.isfinite(v) for v in summary["final_metrics"].values())

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(project / "models" / "tuned-bf16")
    assert next(model.parameters()).dtype == torch.float32  # autocast over fp32 weights
    ids = torch.tensor([[5, 6, 7]])
    assert model.generate(input_ids=ids, max_new_tokens=3, do_sample=False).shape[1] > 3
