"""What the `trainforge` command says in the first hour: counts, the flag a bad value came
from, suggestions that know the aliases, the Jetson guide's own key names, `config show` on
one line per value, a resume that has nothing to train, the ViT guide's resume form, the disk
a run's checkpoints need, and the training-optimisation notes' checkpoint metadata.

Each test runs the real entry point in this process on a tiny digits run (a few steps).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from fakes.cli_args import DIGITS_TINY
from fakes.in_process import run_in_process

REPO = Path(__file__).resolve().parents[1]


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_one_step_is_one_step(tmp_path, monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", *DIGITS_TINY, "--max_steps", "1",
        "--set", f"output.dir={tmp_path}",
    )  # fmt: skip
    assert code == 0, err
    assert "done: finished after 1 step in " in out
    # "1 steps" as a count, not the tail of a rate such as "48.81 steps/s"
    assert not re.search(r"(?<![\d.])1 steps(?!/s)", out), out


def test_a_bad_flag_value_is_blamed_on_the_flag(monkeypatch, capsys):
    code, _, err = run_in_process(
        monkeypatch, capsys, "validate", "config/vit_digits.yaml", "--max_steps", "abc"
    )
    line = one_line(code, err)
    assert line.startswith("--max_steps: training.max_steps = 'abc': ")
    assert "config/vit_digits.yaml" not in line


def test_a_bad_set_value_is_blamed_on_set(monkeypatch, capsys):
    code, _, err = run_in_process(
        monkeypatch, capsys, "validate", "config/vit_digits.yaml", "--set", "training.seed=x"
    )
    assert one_line(code, err).startswith("--set: training.seed = 'x': ")


def test_a_bad_file_value_is_still_the_files(tmp_path, monkeypatch, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("training:\n  max_steps: abc\n")
    code, _, err = run_in_process(monkeypatch, capsys, "validate", str(path))
    assert one_line(code, err).startswith(f"{path}: training.max_steps = 'abc': ")


@pytest.mark.parametrize("where", ["file", "flag"])
def test_did_you_mean_knows_the_aliases(tmp_path, monkeypatch, capsys, where):
    path = tmp_path / "run.yaml"
    path.write_text("data:\n  batchsize: 32\n" if where == "file" else "{}\n")
    extra = ["--set", "data.batchsize=32"] if where == "flag" else []
    code, _, err = run_in_process(monkeypatch, capsys, "validate", str(path), *extra)
    line = one_line(code, err)
    assert "did you mean training.per_device_train_batch_size?" in line
    assert "patch_size" not in line


def write_guide_profile(tmp_path: Path, device: str) -> Path:
    guide = json.loads((REPO / "config/jetson_training.json").read_text())
    guide["device_preference"] = device
    guide["dataset"] = str(REPO / guide["dataset"])
    path = tmp_path / "jetson_training.json"
    path.write_text(json.dumps(guide))
    return path


@pytest.mark.parametrize(
    ("device", "says"),
    [
        ("gpu", "device_preference (training.device) = 'gpu': Input should be"),
        ("mps", "device_preference (training.device) = 'mps': this machine"),
    ],
    ids=["not-a-device", "not-on-this-machine"],
)
def test_the_jetson_guides_device_preference_is_named(tmp_path, monkeypatch, capsys, device, says):
    path = write_guide_profile(tmp_path, device)
    code, _, err = run_in_process(monkeypatch, capsys, "validate", str(path))
    line = one_line(code, err)
    assert line.startswith(f"{path}: {says}"), line
    if device == "mps":
        assert line.endswith("set device_preference to auto or cpu")


def test_config_show_is_one_line_per_value_and_names_the_plan(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", "config/g2p_cmudict.yaml", "--max_steps", "20"
    )
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if not line.startswith("#")}
    assert "{prompt}\\n" in rows["data.options.prompt_template"]
    assert all(line.split()[0] in rows for line in out.splitlines() if not line.startswith("#"))
    warmup = rows["schedule.warmup_steps"]
    assert warmup.split()[1] == "2"
    assert "# plan (shortened to a tenth of the run; was file config/g2p_cmudict.yaml)" in warmup


def test_resuming_a_finished_run_below_its_step_trains_nothing(tmp_path, monkeypatch, capsys):
    base = [*DIGITS_TINY, "--set", f"output.dir={tmp_path}"]
    code, _, err = run_in_process(monkeypatch, capsys, "train", *base, "--max_steps", "4")
    assert code == 0, err
    run = tmp_path / "vit_digits"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*"))
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", "--resume", str(run), "--max_steps", "2"
    )
    assert code == 0, err
    said = [line for line in out.splitlines() if not line.startswith("resuming ")]
    assert said == [
        f"nothing to train: {run} is at step 4 and training.max_steps is 2; raise --max_steps "
        "above 4 to train further"
    ]
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*")) == before


def test_the_vit_guides_resume_form_from_the_project_root(tmp_path, monkeypatch, capsys):
    """`trainforge train CONFIG --resume_from checkpoints/checkpoint_epoch_N.pth`, run where
    the config's run folder is runs/NAME: checkpoints/ is that folder's."""
    monkeypatch.chdir(tmp_path)
    base = [*DIGITS_TINY, "--set", "checkpoint.save_steps=null"]
    base += ["--set", "checkpoint.save_every_epochs=1", "--set", "schedule.warmup_epochs=0"]
    code, out, err = run_in_process(monkeypatch, capsys, "train", *base, "--max_epochs", "3")
    assert code == 0, err
    checkpoints = tmp_path / "runs" / "vit_digits" / "checkpoints"
    # The guide keeps every periodic checkpoint: the demo config does too (no rotation).
    assert {"checkpoint_epoch_1", "checkpoint_epoch_2", "checkpoint_epoch_3"} <= {
        p.name for p in checkpoints.iterdir()
    }
    disk = [line for line in out.splitlines() if line.startswith("disk: ")]
    assert len(disk) == 1 and "checkpoints need about " in disk[0] and " free" in disk[0]
    guide = ["--resume_from", "checkpoints/checkpoint_epoch_1.pth", "--max_epochs", "4"]
    code, out, err = run_in_process(monkeypatch, capsys, "train", *base, *guide)
    assert code == 0, err
    # the checkpoint as the other lines show paths: relative to the project folder
    assert "resumed from runs/vit_digits/checkpoints/checkpoint_epoch_1 (epoch 1, step 23)" in out
    missing = ["--resume_from", "checkpoints/checkpoint_epoch_50.pth", "--max_epochs", "200"]
    code, out, err = run_in_process(monkeypatch, capsys, "train", *base, *missing)
    line = one_line(code, err)
    assert line.startswith("--resume_from checkpoints/checkpoint_epoch_50.pth: not found")
    assert "runs/vit_digits/checkpoints" in line and "--resume " not in line


def test_the_guides_configs_and_the_demo_keep_every_periodic_checkpoint():
    for name in ("vit_cifar10", "vit_cifar10_small", "vit_cifar10_large", "vit_digits"):
        data = yaml.safe_load((REPO / "config" / f"{name}.yaml").read_text())
        assert data["checkpoint"]["save_total_limit"] is None, name
        assert data["checkpoint"]["save_every_epochs"], name


def test_checkpoint_meta_has_the_notes_keys(tmp_path, monkeypatch, capsys):
    args = [*DIGITS_TINY, "--set", f"output.dir={tmp_path}", "--max_steps", "4"]
    args += ["--set", "evaluation.eval_steps=2", "--set", "evaluation.metric_for_best_model=loss"]
    code, _, err = run_in_process(monkeypatch, capsys, "train", *args)
    assert code == 0, err
    meta = json.loads((tmp_path / "vit_digits/checkpoints/checkpoint_meta.json").read_text())
    for key in ("best_val_loss", "best_val_step", "best_epoch", "config_hash", "timestamp"):
        assert meta.get(key) is not None, (key, meta)
    assert meta["best_val_step"] in (2, 4) and meta["best_val_loss"] == meta["best_val"]
    assert meta["latest_step"] == 4


def test_slurm_without_submit_creates_the_log_folder(tmp_path, monkeypatch, capsys):
    logs = tmp_path / "logs" / "slurm"
    code, out, err = run_in_process(
        monkeypatch, capsys, "slurm", "config/vit_digits.yaml", "--nodes", "1",
        "--gpus-per-node", "0", "--time", "00:10:00", "--output-dir", str(logs),
    )  # fmt: skip
    assert code == 0, err
    assert f"--output={logs}/slurm-%x-%j.out" in out and logs.is_dir()
    blocked = tmp_path / "file"
    blocked.write_text("")
    code, _, err = run_in_process(
        monkeypatch, capsys, "slurm", "config/vit_digits.yaml", "--nodes", "1",
        "--gpus-per-node", "0", "--time", "00:10:00", "--output-dir", str(blocked / "x"),
    )  # fmt: skip
    assert "cannot create the log folder" in one_line(code, err)


def _commands(command, path=()):
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


def test_no_help_page_shows_a_value_type_for_a_flag():
    """`--help` and `--version` take no value: no help page lists them with `<bool>`."""
    import typer
    from typer.testing import CliRunner

    from trainforge.cli import app

    runner = CliRunner()
    pages = list(_commands(typer.main.get_command(app)))
    assert ("export",) in pages and ("serve",) in pages and len(pages) > 10
    for path in pages:
        result = runner.invoke(app, [*path, "--help"], prog_name="trainforge", terminal_width=100)
        assert result.exit_code == 0, (path, result.output)
        assert "trainforge" in result.output, path
        assert "<bool>" not in result.output, (path, result.output)


def test_a_run_that_ends_between_validations_ends_with_its_number(tmp_path, monkeypatch, capsys):
    """The digits config validates every 5 epochs; 30 steps end inside the first five, and
    the run still closes with a validation: in summary.json and in its last lines."""
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", str(REPO / "config" / "vit_digits.yaml"),
        "--max_steps", "30", "--num_threads", "1", "--set", f"output.dir={tmp_path}",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads((tmp_path / "vit_digits" / "summary.json").read_text())
    accuracy = summary["final_metrics"]["accuracy"]
    assert summary["best_metric"] == accuracy
    assert f"validation accuracy {accuracy * 100:.2f}%" in out.split("done: finished")[1]
    records = [json.loads(x) for x in (tmp_path / "vit_digits" / "metrics.jsonl").open()]
    assert [r["step"] for r in records if r.get("split") == "val"] == [30]


@pytest.mark.parametrize(
    ("start", "says"),
    [
        (0, "done: finished after 6 steps in 3.0 s of training\n"),
        (4, "done: finished after 6 steps in 3.0 s of training in all; this segment 2 steps "
            "in 1.0 s\n"),
        (6, "done: finished after 6 steps in 3.0 s of training in all; none in this segment\n"),
    ],
)  # fmt: skip
def test_the_done_line_of_a_fresh_a_resumed_and_an_already_finished_segment(
    tmp_path, capsys, start, says
):
    from trainforge.run.outputs import RunSummary, print_summary

    summary = RunSummary(tmp_path, {}, None, "finished", False, 6, 3.0, start_step=start,
                         start_time_s=2.0 if start else 0.0)  # fmt: skip
    print_summary(summary)
    assert capsys.readouterr().out == says
