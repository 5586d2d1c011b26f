"""The whole-process benchmark runs (one epoch a side here) and its plain script keeps the
main job's recipe."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import whole_job
from peers.plain_digits import RECIPE

REPO = Path(__file__).resolve().parents[2]


def test_the_plain_script_trains_the_main_jobs_recipe():
    config = yaml.safe_load((REPO / "config" / "vit_digits.yaml").read_text())
    t, o, s, e = config["training"], config["optimizer"], config["schedule"], config["evaluation"]
    assert RECIPE["batch_size"] == t["per_device_train_batch_size"]
    assert RECIPE["num_epochs"] == t["num_train_epochs"]
    assert RECIPE["max_grad_norm"] == t["max_grad_norm"] and RECIPE["seed"] == t["seed"]
    assert RECIPE["learning_rate"] == o["learning_rate"]
    assert RECIPE["weight_decay"] == o["weight_decay"]
    assert RECIPE["warmup_epochs"] == s["warmup_epochs"] and s["lr_scheduler_type"] == "cosine"
    assert RECIPE["eval_every_epochs"] == e["eval_every_epochs"]
    assert RECIPE["label_smoothing"] == config["task"]["label_smoothing"]
    assert RECIPE["val_fraction"] == config["data"]["options"]["val_fraction"]
    assert RECIPE["crop_padding"] == config["data"]["random_crop_padding"]


@pytest.mark.slow  # two whole training processes
def test_whole_job_times_both_processes_and_splits_them():
    text, ratios = whole_job.run(epochs=1, pairs=1, warmup=0)
    assert "trainforge train" in text and "plain PyTorch script" in text
    assert ratios["whole_job_ratio"] > 0
    assert -1.0 <= ratios["whole_job_accuracy_delta"] <= 1.0
    rows = {line.split("  ")[0].strip(): line.split() for line in text.splitlines()[3:]}
    for name, cells in rows.items():
        # ... total start-up training finish report accuracy % per-seed runs (one pair)
        total, startup, train, finish = (float(v) for v in cells[-9:-5])
        assert startup > 0 and train > 0 and finish > 0, name
        assert abs(startup + train + finish - total) < 0.5  # the three parts make the whole
    # trainforge handed its report to a detached child (a terminal), which finished it
    assert float(rows["trainforge train"][-5]) >= 0
    assert rows["plain PyTorch script"][-5] == "-"
