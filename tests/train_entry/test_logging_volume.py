"""`run.header.logging_volume_line`: a run whose `logging.logging_steps` would write more
than 10^7 train records over its planned steps says so at start, with the records, the
disk they take and a logging_steps that stays under; the run goes on."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trainforge.config import validate
from trainforge.hardware import detect
from trainforge.run import header

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "config" / "vit_digits.yaml"
STEPS_PER_EPOCH = 23  # vit_digits: 1,437 training images, batch 64


def _config(*sets: str):
    return validate(DIGITS, platform=detect(), overrides=["training.device=cpu", *sets])


def test_records_count_every_logging_point_each_epoch_end_and_the_last_step_once():
    # 40 steps, a record every 10 and at the ends of the 16-step epochs: 10 16 20 30 32 40
    assert header.train_records(40, 10, 16) == 6
    assert header.train_records(41, 10, 16) == 7  # and the last step, 41
    assert header.train_records(10**5, 1, 23) == 10**5


def test_every_step_logging_over_a_long_run_is_one_warning_line_with_the_disk_and_the_fix():
    config = _config("logging.logging_steps=1").config
    line = header.logging_volume_line(config, 2 * 10**7, STEPS_PER_EPOCH)
    assert line is not None and "\n" not in line
    assert line.startswith(
        "warning: logging.logging_steps=1 writes about 20,000,000 train records over "
        "20,000,000 steps (about 21.0 GB in metrics.jsonl and TensorBoard); "
    )
    fix = int(re.search(r"--set logging\.logging_steps=(\d+) or more", line)[1])
    assert header.train_records(2 * 10**7, fix, STEPS_PER_EPOCH) <= header.MANY_RECORDS
    assert header.train_records(2 * 10**7, fix // 2, STEPS_PER_EPOCH) > header.MANY_RECORDS


def test_the_disk_counts_only_the_loggers_that_are_on():
    config = _config("logging.logging_steps=1", "logging.tensorboard=false").config
    line = header.logging_volume_line(config, 2 * 10**7, STEPS_PER_EPOCH)
    assert "(about 9.0 GB in metrics.jsonl)" in line


@pytest.mark.parametrize(
    ("steps", "logging_steps"), [(10**7, 1), (5 * 10**8, 50), (2 * 10**7, 2 * 10**7)]
)
def test_no_line_at_or_under_ten_million_records(steps, logging_steps):
    config = _config(f"logging.logging_steps={logging_steps}").config
    assert header.logging_volume_line(config, steps, 10**9) is None


def test_one_step_epochs_write_a_record_each_whatever_the_cadence():
    config = _config("logging.logging_steps=1").config
    line = header.logging_volume_line(config, 2 * 10**7, 1)
    assert line.endswith("each of its 20,000,000 epochs ends with a record too: fewer, longer "
                         "epochs write fewer")  # fmt: skip


def test_the_start_prints_the_line_and_goes_on(capsys, tmp_path):
    resolved = _config("logging.logging_steps=1")
    model = torch.nn.Linear(2, 2)
    task = SimpleNamespace(num_train_samples=1437, model=model, val_loader=None)
    loop = SimpleNamespace(task=task, total_steps=2 * 10**7, steps_per_epoch=STEPS_PER_EPOCH)
    header.print_start(resolved, detect(), loop, torch.device("cpu"), "fp32", tmp_path, [])
    lines = capsys.readouterr().out.splitlines()
    warned = [ln for ln in lines if ln.startswith("warning: logging.logging_steps=1 ")]
    assert len(warned) == 1
    assert lines.index(warned[0]) == lines.index(f"run folder: {tmp_path}") + 1
