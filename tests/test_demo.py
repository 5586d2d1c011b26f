"""The main job's bar: `make demo` trains the digits ViT in <= 90 s to >= 95 % test accuracy."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_demo_config_meets_the_bar(tmp_path, cli):
    result = cli("train", "config/vit_digits.yaml", "--set", f"output.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "vit_digits" / "summary.json").read_text())
    assert summary["train_time_s"] <= 90.0
    assert summary["final_metrics"]["accuracy"] >= 0.95
    assert "profile: cpu (auto:" in result.stdout
