"""The command line of `train` / `validate` / `config show` (trainforge.config.flags).

Every schema field named like a Hugging Face `TrainingArguments` field is a `--name value`
flag that reaches the resolved config with the source `flag --name`; the audit's error cases
are answered in one pass, one line per problem, exit 2.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
import transformers
from tests.fakes.in_process import run_in_process

from trainforge.config import get_dotted, load
from trainforge.config.flags import ALIASES, flag_fields, leaf_types
from trainforge.config.schema import owned_path

REPO = Path(__file__).resolve().parents[2]
DIGITS = str(REPO / "config" / "vit_digits.yaml")
HF_NAMES = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
# The names every Trainer user types: each must be among the flags walked below.
MUST_COVER = {
    "max_steps", "save_steps", "save_total_limit", "logging_steps", "learning_rate",
    "per_device_train_batch_size", "gradient_accumulation_steps", "warmup_steps",
    "num_train_epochs", "seed", "output_dir",
}  # fmt: skip
# Fields whose value is better chosen by hand than by the rule in pick_value:
SPECIAL_VALUES: dict[str, str] = {
    # paths and names: something that reads as one (the rule would give "output_dir-value")
    "output_dir": "hf-style-runs",
    "run_name": "hf-style-name",
    # int | auto: a round batch (half the file's 64) rather than the rule's odd 65;
    # the cpu profile has no micro-batch cap, so the plan keeps it as the micro-batch
    "per_device_train_batch_size": "32",
    # a registered name (the schema checks it against the schedule registry)
    "lr_scheduler_type": "linear",
}


def _baseline() -> dict[str, Any]:
    """Resolved value of every field for vit_digits.yaml on the cpu profile, no flags."""
    config = load(Path(DIGITS), profile="cpu").config
    return {path: get_dotted(config, path) for path in leaf_types()}


def hf_flags() -> dict[str, str]:
    """Flag name -> dotted field, for every flag that is a TrainingArguments field name."""
    return {name: path for name, path in flag_fields().items() if name in HF_NAMES}


def _members(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def pick_value(name: str, path: str, current: Any) -> str:
    """A valid value for the field that differs from its current one, as typed on a shell."""
    if name in SPECIAL_VALUES:
        return SPECIAL_VALUES[name]
    members = _members(leaf_types()[path])
    if bool in members:
        return "false" if current else "true"
    if int in members:
        return str(current + 1 if isinstance(current, int) and current > 0 else 3)
    if float in members:
        return repr(current / 2 if current else 0.5)
    for member in members:
        if typing.get_origin(member) is Literal:
            return next(str(c) for c in typing.get_args(member) if c != current)
    if str in members:
        return f"{name}-value"
    raise AssertionError(f"--{name}: no value rule for {leaf_types()[path]}")


def show_rows(out: str) -> dict[str, tuple[str, str]]:
    """`config show` rows: dotted path -> (printed value, source)."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("#") or "  # " not in line:
            continue
        left, _, source = line.partition("  # ")
        path, _, value = left.strip().partition(" ")
        rows[path] = (value.strip(), source.strip())
    return rows


def test_the_walk_covers_the_names_trainer_users_type():
    covered = set(hf_flags())
    assert covered >= MUST_COVER, sorted(MUST_COVER - covered)
    assert hf_flags()["output_dir"] == ALIASES["output_dir"] == "output.dir"
    # every schema leaf named like a TrainingArguments field is a flag of that name
    named = {p.rsplit(".", 1)[1] for p in leaf_types() if "." in p} & HF_NAMES
    assert named <= covered, sorted(named - covered)


BASELINE = _baseline()
WALK = sorted(hf_flags().items())


@pytest.mark.parametrize(("name", "path"), WALK, ids=[name for name, _ in WALK])
def test_every_trainer_name_is_a_flag_that_reaches_the_config(name, path, monkeypatch, capsys):
    value = pick_value(name, path, BASELINE[path])
    assert value != str(BASELINE[path])  # the flag must change something to be seen
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--profile", "cpu", f"--{name}", value
    )
    assert code == 0, err
    shown, source = show_rows(out)[owned_path(path)]  # an entry's option: where it lives
    assert (shown, source) == (_printed(path, value), f"flag --{name}"), (name, value)


def _printed(path: str, value: str) -> str:
    """How `config show` prints the value typed on the command line."""
    members = _members(leaf_types()[path])
    if bool in members:
        return str(value == "true")
    if float in members and int not in members:
        return str(float(value))
    return value


def test_train_help_groups_the_flags_by_section(monkeypatch, capsys):
    code, out, err = run_in_process(monkeypatch, capsys, "train", "--help")
    assert code == 0, err
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif line.startswith("  --") and current is not None:
            # `Run:` rows are "--flag  description"; the sections' rows list flags only
            words = line.split()
            current += words[:1] if current is sections.get("Run") else words
    assert {"Run", "training", "optimizer", "schedule", "checkpoint", "logging", "data"} <= set(
        sections
    ), sorted(sections)
    expect = {
        "Run": ["--config", "--profile", "--set", "--resume_from_checkpoint", "--report_to"],
        "training": ["--max_steps", "--per_device_train_batch_size", "--batch_size", "--seed"],
        "optimizer": ["--learning_rate", "--weight_decay"],
        "schedule": ["--warmup_steps", "--lr_scheduler_type"],
        "checkpoint": ["--save_steps", "--save_total_limit"],
        "logging": ["--logging_steps"],
        "data": ["--data_file", "--eval_file"],
        "output": ["--output_dir", "--run_name"],
    }
    for section, names in expect.items():
        assert set(names) <= set(sections[section]), (section, sections[section])


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return str(path)


DIGITS_FILE = "profile: cpu\ndata:\n  dataset: digits\n"


def test_a_misspelt_field_suggests_the_full_dotted_path(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, "lr.yaml", DIGITS_FILE + "optimizer:\n  lr: 0.001\n")
    code, out, err = run_in_process(monkeypatch, capsys, "validate", path)
    assert code == 2 and "OK" not in out
    assert err.splitlines() == [
        f"{path}: optimizer.lr: unknown key; did you mean optimizer.learning_rate?"
    ]


BOTH = DIGITS_FILE + ("training:\n  max_stepz: 5\n  max_steps: 10\nschedule:\n  warmup_steps: 10\n")


def test_key_and_cross_field_errors_are_reported_in_one_pass(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, "both.yaml", BOTH)
    code, out, err = run_in_process(monkeypatch, capsys, "validate", path)
    assert code == 2 and "OK" not in out
    lines = err.splitlines()
    assert f"{path}: training.max_stepz: unknown key; did you mean training.max_steps?" in lines
    warmup = [line for line in lines if "schedule.warmup_steps = 10" in line]
    assert warmup == [
        f"{path}: schedule.warmup_steps = 10: not shorter than training.max_steps = 10; "
        "lower warmup_steps"
    ]
    assert len(lines) == 2 and "Traceback" not in err


def test_config_show_of_an_invalid_file_prints_its_errors(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, "both.yaml", BOTH)
    code, out, err = run_in_process(monkeypatch, capsys, "config", "show", path)
    assert code == 2
    assert out == ""  # no half-resolved table
    assert len(err.splitlines()) == 2
    assert "training.max_stepz: unknown key" in err and "schedule.warmup_steps = 10" in err


def test_config_show_takes_the_guide_batch_size_flag(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--profile", "cpu", "--batch_size", "8"
    )
    assert code == 0, err
    rows = show_rows(out)
    assert rows["training.per_device_train_batch_size"] == ("8", "flag --batch_size")
    assert rows["training.global_batch_size"][0] == "8"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("wandb,tensorboard", {"wandb": "True", "tensorboard": "True", "mlflow": "False"}),
        ("mlflow", {"wandb": "False", "tensorboard": "False", "mlflow": "True"}),
        ("all", {"wandb": "True", "tensorboard": "True", "mlflow": "True"}),
        ("none", {"wandb": "False", "tensorboard": "False", "mlflow": "False"}),
    ],
)
def test_report_to_chooses_the_trackers(value, expected, monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--profile", "cpu", "--report_to", value
    )
    assert code == 0, err
    rows = show_rows(out)
    assert {k: rows[f"logging.{k}"][0] for k in expected} == expected
    assert {rows[f"logging.{k}"][1] for k in expected} == {"flag --report_to"}


def test_report_to_an_unknown_tracker_is_one_line(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--report_to", "bogus"
    )
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("--report_to bogus: unknown tracker ['bogus']")
    assert "use tensorboard, mlflow, wandb (comma-separated), all or none" in line


def test_config_flag_equals_the_positional_file(monkeypatch, capsys):
    show = ["config", "show", "--profile", "cpu", "--max_steps", "7"]
    code, positional, err = run_in_process(monkeypatch, capsys, *show, DIGITS)
    assert code == 0, err
    code, flagged, err = run_in_process(monkeypatch, capsys, *show, "--config", DIGITS)
    assert code == 0, err
    code, inline, err = run_in_process(monkeypatch, capsys, *show, f"--config={DIGITS}")
    assert code == 0, err
    assert flagged == positional == inline
    assert show_rows(positional)["model.embedding_dim"] == ("128", f"file {DIGITS}")


@pytest.mark.parametrize("command", [["train"], ["validate"], ["config", "show"]])
def test_an_unknown_flag_names_the_nearest(command, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)  # a train that went ahead would write runs/ here
    code, out, err = run_in_process(monkeypatch, capsys, *command, DIGITS, "--max_step", "3")
    assert code == 2 and out == ""
    assert err.splitlines() == ["--max_step: unknown flag. did you mean --max_steps?"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "path", "row"),
    [
        (["--tensorboard", "off"], "logging.tensorboard", ("False", "flag --tensorboard")),
        (["--tensorboard", "no"], "logging.tensorboard", ("False", "flag --tensorboard")),
        (["--tensorboard=0"], "logging.tensorboard", ("False", "flag --tensorboard")),
        (["--mlflow"], "logging.mlflow", ("True", "flag --mlflow")),
        (["--mlflow", "on"], "logging.mlflow", ("True", "flag --mlflow")),
        # Hugging Face's parser takes both spellings of a field name
        (["--max-steps", "3"], "training.max_steps", ("3", "flag --max-steps")),
        (["--save-total-limit=2"], "checkpoint.save_total_limit", ("2", "flag --save-total-limit")),
    ],
)
def test_flag_spellings_and_boolean_words(args, path, row, monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--profile", "cpu", *args
    )
    assert code == 0, err
    assert show_rows(out)[path] == row


def test_a_boolean_flag_with_a_word_that_is_no_boolean_is_an_error(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--tensorboard=maybe"
    )
    assert code == 2 and out == ""
    assert err.splitlines() == ["--tensorboard=maybe: not true or false. write --tensorboard=false"]


@pytest.mark.parametrize("word", ["null", "None", "~"])
def test_an_optional_file_flag_takes_null_as_no_file(word):
    """`--test_file null` and `--eval_file null` as the DGX Spark plan's flags: no test
    split, validation held out of the training file (as `--set data.options.test_file=null`);
    flags are no old spelling: no notice."""
    from trainforge.config.flags import parse

    args = parse(["--test_file", word, "--eval_file", word, "--data_file", "null.tsv"])
    config = load(Path("config/g2p_cmudict.yaml"), flags=args.flags, overrides=args.overrides)
    data = config.config.data.options
    assert (data.test_file, data.validation_file, data.train_file) == (None, None, "null.tsv")
    assert config.notes == ()


def test_relative_max_steps_counts_from_step_0_on_a_fresh_run(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--profile", "cpu", "--max_steps", "+5"
    )
    assert code == 0, err
    assert show_rows(out)["training.max_steps"] == ("5", "flag --max_steps +5")


@pytest.mark.parametrize("value", ["+0", "+x", "+1.5"])
def test_a_bad_relative_max_steps_is_one_line(value, monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "config", "show", DIGITS, "--max_steps", value
    )
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"--max_steps {value}: not a number of steps to add")


@pytest.mark.parametrize(
    "argv",
    [
        ["--run_name", "g2preal", "--output-name", "g2p-real"],
        ["--output-name", "g2p-real", "--run_name", "g2preal"],
    ],
)
def test_output_name_keeps_an_explicit_run_name(argv):
    from trainforge.config.flags import parse

    args = parse(argv)
    assert args.flags["output.model_name"] == "g2p-real"
    assert args.flags["output.run_name"] == "g2preal"
    assert parse(["--output-name", "g2p-real"]).flags["output.run_name"] == "g2p-real"
