"""The logging-disk benchmark's accounting, on files written here: metrics.jsonl bytes per
line by split, and TensorBoard event bytes by kind as TensorBoardLogger writes them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import logging_disk
import run as bench_run

from trainforge.observe.loggers import TensorBoardLogger


def test_jsonl_bytes_are_counted_per_line_by_split(tmp_path):
    lines = [{"split": "train", "step": 1}, {"split": "train", "step": 2},
             {"split": "val", "step": 2}]  # fmt: skip
    text = "".join(json.dumps(r) + "\n" for r in lines)
    (tmp_path / "metrics.jsonl").write_text(text)
    splits = logging_disk.jsonl_bytes(tmp_path / "metrics.jsonl")
    assert {k: len(v) for k, v in splits.items()} == {"train": 2, "val": 1}
    assert sum(sum(v) for v in splits.values()) == len(text.encode())


def test_tensorboard_bytes_split_train_scalars_histograms_and_the_rest(tmp_path):
    logger = TensorBoardLogger(tmp_path / "tb")
    model = torch.nn.Linear(4, 2)
    for step in range(1, 11):
        logger.log("train", {"loss": 1.0 / step, "lr": 0.1}, step, step / 10)
    logger.log("val", {"loss": 0.5}, 10, 1.0)
    logger.log_histograms(model, 5)
    logger.log_histograms(model, 10)
    logger.close()
    found = logging_disk.tensorboard_bytes(tmp_path / "tb")
    assert found["train_steps"] == 10
    assert found["histogram_sets"] == 2
    assert found["train_scalars"] > 0 and found["histograms"] > 0 and found["other"] > 0
    on_disk = sum(p.stat().st_size for p in (tmp_path / "tb").glob("events.out.tfevents.*"))
    # every record counted once, framing included (the file's version header is "other")
    assert found["train_scalars"] + found["histograms"] + found["other"] == on_disk


def test_its_rows_are_registered_as_information():
    rows = [row for row in bench_run.BENCHMARKS if row[0] == "logging_disk"]
    assert {key for _, key, _, _ in rows} == {
        "logging_jsonl_bytes_per_record", "logging_tensorboard_bytes_per_step", "logging_day_gb"
    }  # fmt: skip
    assert all(direction == "info" for *_, direction in rows)
