"""Every shipped run config runs short: `--max_steps 10` and `--max_epochs 1` both finish and
leave a verified checkpoint of their last step.

The configs run as shipped (recipe, schedule, checkpoints, evaluation) in a project folder
the test builds, with three kinds of stand-in so a 2-core CPU finishes in minutes:
a tiny CIFAR-10 archive in the real format (100 training images) for the CIFAR configs, a
few lines of each text split, and small models (`--embedding_dim 32 ...` for the ViTs,
`model.init_size=tiny` / a tiny GPT-2 for the language models). A warmup longer than the
shortened run must be shortened with one notice, never refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.fakes.in_process import run_in_process

from trainforge.engine import checkpoint as ckpt
from trainforge.runfolder import RunFolder

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.name for p in (REPO / "config").iterdir() if p.suffix in (".yaml", ".json"))
COMMON = ["--profile", "cpu", "--num_threads", "1", "--output_dir", "runs", "--run_name", "r"]
SMALL_VIT = ["--embedding_dim", "32", "--num_layers", "1", "--num_heads", "2", "--mlp_size", "64"]
SHORT = {"steps": ["--max_steps", "10"], "epoch": ["--max_epochs", "1"]}


@pytest.fixture
def torch_threads():
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def project_for(name: str, tmp_path: Path, tiny_cifar: dict | None) -> list[str]:
    """Build the project folder a user of this config would have; the extra flags."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    if name.startswith("vit_cifar10"):
        root = tiny_cifar["archive_root"]
        return [*SMALL_VIT, "--set", f"data.root={root}", "--set", "data.download=false"]
    if name == "vit_digits.yaml":
        return []
    if name == "g2p_cmudict.yaml":
        g2p = tmp_path / "example_datasets" / "g2p"
        g2p.mkdir(parents=True)
        for split, count in (("train", 64), ("val", 8), ("test", 8)):
            lines = (REPO / "example_datasets" / "g2p" / f"cmudict_{split}.tsv").read_text()
            (g2p / f"cmudict_{split}.tsv").write_text("".join(lines.splitlines(True)[:count]))
        return ["--set", "model.init_size=tiny", "--per_device_eval_batch_size", "8",
                "--set", "task.max_new_tokens=8", "--per_device_train_batch_size", "8"]  # fmt: skip
    if name == "jetson_training.json":
        data = tmp_path / "example_datasets"
        data.mkdir()
        records = json.loads((REPO / "example_datasets" / "jetson_training.json").read_text())
        (data / "jetson_training.json").write_text(json.dumps(records[:24]))
        code = run_in_process_models(tmp_path)
        assert code == 0
        return ["--base-model", "models/tiny", "--set", "data.max_seq_length=64"]
    raise AssertionError(f"a new shipped config {name}: add its project to this test")


def run_in_process_models(tmp_path: Path) -> int:
    import sys

    from trainforge.cli import main

    argv = sys.argv
    sys.argv = ["trainforge", "models", "init", "tiny", "--arch", "gpt2", "--size", "tiny",
                "--corpus", "example_datasets/jetson_training.json"]  # fmt: skip
    try:
        main()
    except SystemExit as done:
        return int(done.code or 0)
    finally:
        sys.argv = argv
    return 0


def test_every_shipped_config_has_a_project_here():
    assert set(SHIPPED) == {
        "g2p_cmudict.yaml", "jetson_training.json", "vit_cifar10.yaml",
        "vit_cifar10_custom.yaml", "vit_cifar10_large.yaml", "vit_cifar10_small.yaml",
        "vit_digits.yaml",
    }  # fmt: skip


@pytest.mark.usefixtures("torch_threads")
@pytest.mark.parametrize("short", sorted(SHORT))
@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_config_runs_short_and_leaves_its_last_checkpoint(
    name, short, tmp_path, monkeypatch, capsys, request
):
    monkeypatch.chdir(tmp_path)
    tiny = request.getfixturevalue("tiny_cifar") if name.startswith("vit_cifar10") else None
    extra = project_for(name, tmp_path, tiny)
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", f"config/{name}", *COMMON, *extra, *SHORT[short]
    )
    assert code == 0, out[-3000:] + err
    assert "done: finished after " in out, out[-2000:]
    steps = int(out.split("done: finished after ")[1].split()[0])
    if short == "steps":
        assert steps == 10
    run = RunFolder(tmp_path / "runs" / "r")
    latest = ckpt.latest(run.checkpoints)
    assert latest is not None and latest.meta["global_step"] == steps, latest
    assert ckpt.verify(latest.path) is None
    assert "warmup" not in err  # never refused for its warmup
    shortened = [line for line in out.splitlines() if line.startswith("schedule: warmup")]
    assert len(shortened) <= 1
