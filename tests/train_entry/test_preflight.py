"""`run.preflight`: the refusals `trainforge train` says before torch loads, and where it
leaves the choice to the run's own claim (a launcher's restart, `--resume`, a run's own
output model)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from trainforge.errors import UserError
from trainforge.run.preflight import check_fresh_run
from trainforge.runfolder import RunFolder


def config(overwrite: bool = False, model_name: str | None = "out", models_dir: str = "models"):
    output = SimpleNamespace(overwrite=overwrite, model_name=model_name, models_dir=models_dir)
    model = SimpleNamespace(init_from=None, model_name_or_path="base", init_arch="gpt2")
    return SimpleNamespace(output=output, task=SimpleNamespace(kind="causal-lm"), model=model)


@pytest.fixture
def taken(tmp_path, monkeypatch):
    """runs/old holding a run; models/out written by it."""
    monkeypatch.chdir(tmp_path)
    for name in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    folder = RunFolder(tmp_path / "runs" / "old")
    folder.path.mkdir(parents=True)
    folder.metrics.write_text("{}\n", encoding="utf-8")
    (tmp_path / "models" / "out").mkdir(parents=True)
    record = {"run_dir": str(folder.path)}
    (tmp_path / "models" / "out" / "trainforge.json").write_text(json.dumps(record))
    return folder


def test_a_taken_run_folder_is_refused_unless_a_launcher_restarted_the_job(taken, monkeypatch):
    with pytest.raises(UserError, match="runs/old already holds a run \\(metrics\\)"):
        check_fresh_run(config(), taken, None)
    check_fresh_run(config(), taken, "auto")  # --resume: the claim picks the checkpoint
    check_fresh_run(config(overwrite=True), taken, None)
    for name, value in (("TORCHELASTIC_RUN_ID", "job"), ("SLURM_JOB_ID", "42")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            check_fresh_run(config(), taken, None)  # the run may be continuing by itself


def test_an_output_model_of_another_run_is_refused(taken, tmp_path):
    other = RunFolder(tmp_path / "runs" / "new")
    with pytest.raises(UserError, match="model folder models/out already exists"):
        check_fresh_run(config(), other, None)
    check_fresh_run(config(overwrite=True), other, None)
    check_fresh_run(config(model_name="fresh"), other, None)
    check_fresh_run(config(), taken, "auto")  # the run's own model: it may replace it


def _refused_without_torch(cwd, *args: str) -> tuple[int, str]:
    """`trainforge ARGS` in a child: (exit code, stderr); the child fails if torch loaded."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom trainforge import cli\n"
        f"sys.argv = ['trainforge', *{list(args)!r}]\n"
        "try:\n    cli.main()\nexcept SystemExit as exit_:\n    status = exit_.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nsys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=60
    )
    return done.returncode, done.stderr


def test_a_missing_or_unset_base_model_is_refused_before_torch_loads_and_by_validate(tmp_path):
    """The base model folder needs no data or model to check: train says it at once and
    validate says it too, in the words the model loader would use."""
    from fakes.in_process import run_main

    (tmp_path / "models" / "empty").mkdir(parents=True)
    for flags, said in (
        (["--base-model", "models/nothere"], "not a Hugging Face model folder (no such folder)"),
        (["--base-model", "models/empty"], "not a Hugging Face model folder (no config.json"),
        ([], "model.model_name_or_path is not set"),
    ):
        code, err = _refused_without_torch(tmp_path, "train", "jetson_training", *flags)
        assert code == 2 and said in err and "Traceback" not in err, err
        ran = run_main("validate", "jetson_training", *flags, cwd=tmp_path)
        assert ran.returncode == 2 and said in ran.stderr, ran.stdout + ran.stderr
        assert "OK" not in ran.stdout


def test_validate_refuses_an_output_model_another_run_wrote(tmp_path):
    from fakes.in_process import run_main

    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text("{}")
    (tmp_path / "models" / "my-model").mkdir()
    flags = ("--base-model", "models/tiny", "--output-name", "my-model")
    ran = run_main("validate", "jetson_training", *flags, cwd=tmp_path)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "model folder models/my-model already exists" in ran.stderr
    ran = run_main("validate", "jetson_training", *flags, "--overwrite", cwd=tmp_path)
    assert ran.returncode == 0 and "OK jetson_training" in ran.stdout, ran.stderr


def test_a_folder_with_files_but_no_model_where_init_arch_creates_one_is_refused_first(tmp_path):
    """g2p_cmudict creates its base model on first use (model.init_arch): a named folder that
    holds files but no model is refused by validate and train before torch loads; an empty
    one is no obstacle, the model is created into it."""
    from fakes.in_process import run_main

    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    said = "base model folder junk holds files but no model (no config.json)"
    code, err = _refused_without_torch(tmp_path, "train", "g2p_cmudict", "--base-model", "junk")
    assert code == 2 and said in err and "Traceback" not in err, err
    ran = run_main("validate", "g2p_cmudict", "--base-model", "junk", cwd=tmp_path)
    assert ran.returncode == 2 and said in ran.stderr, ran.stdout + ran.stderr
    (tmp_path / "empty").mkdir()
    ran = run_main("validate", "g2p_cmudict", "--base-model", "empty", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_an_empty_folder_takes_the_model_init_arch_creates(tmp_path):
    from trainforge.models.hf_init import init_model

    corpus = tmp_path / "words.tsv"
    corpus.write_text("hello\tHH AH0 L OW1\nworld\tW ER1 L D\n")
    (tmp_path / "made").mkdir()
    init_model("made", corpus=[corpus], arch="llama", size="tiny", dest=tmp_path / "made")
    assert (tmp_path / "made" / "config.json").is_file()
