"""Real runs for the tests, in one place: the tiny ViT's settings, the one-thread block, the
in-process trainer (`trainforge.train.train`, the path `trainforge train` takes) and a small
G2P project trained by the DGX Spark plan's own command line.

tests/conftest.py trains the session's shared runs from here (`digits_run`, a vision run;
`g2p_run`, a causal-lm one); a test that needs a run of its own calls `train_digits`, or
`g2p_project` and the plan's command. Runs draw no report (`logging.report: false`) unless
a test asks for one: matplotlib's plots cost more than the few steps such a run trains.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "config" / "vit_digits.yaml"
G2P_CONFIG = REPO / "config" / "g2p_cmudict.yaml"
G2P_WORDS = REPO / "example_datasets" / "g2p"
# A ViT small enough that a few steps on the bundled digits take well under a second.
TINY_VIT = {
    "model.embedding_dim": 16,
    "model.num_layers": 1,
    "model.num_heads": 2,
    "model.mlp_size": 16,
}
# What a test run does not need: TensorBoard, trackers, a progress bar, the report.
QUIET = {
    "logging.tensorboard": "false",
    "logging.mlflow": "false",
    "logging.wandb": "false",
    "logging.progress_bar": "false",
    "logging.report": "false",
}
# The session's shared run: 15 epochs of the demo's small ViT (about 10 s on a laptop CPU),
# one validation at the end and the best checkpoint.
SHARED_EPOCHS = 15


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one CPU thread inside the block; the process setting is restored after.
    A tiny model gains little from a second thread, and on a busy machine torch's thread
    barriers cost more than they give."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def overrides(**sets) -> list[str]:
    """`--set` values (KEY=VALUE) of a quiet run with `sets` on top."""
    return [f"{k}={v}" for k, v in {**QUIET, **sets}.items()]


def train_digits(out_dir: Path, epochs: int = SHARED_EPOCHS, name: str = "digits", **sets) -> Path:
    """The demo's config for `epochs` epochs, validated at the last, on one thread; the run
    folder."""
    from trainforge.config import validate
    from trainforge.hardware import detect
    from trainforge.train import train

    sets = {
        "output.dir": out_dir,
        "output.run_name": name,
        "training.num_train_epochs": epochs,
        "evaluation.eval_every_epochs": epochs,
        "checkpoint.save_every_epochs": "null",
        "training.num_threads": 1,
        **sets,
    }
    platform = detect()
    resolved = validate(DIGITS, platform=platform, overrides=overrides(**sets))
    with one_thread():
        summary = train(resolved, platform)
    return summary.run_dir


def g2p_project(project: Path) -> Path:
    """`project` with the shipped G2P config and small train (60), val (8) and test (8)
    word<TAB>phonemes files: t.tsv, v.tsv, test.tsv."""
    import shutil

    (project / "config").mkdir(parents=True, exist_ok=True)
    shutil.copy(G2P_CONFIG, project / "config")
    for name, split, count in (("t", "train", 60), ("v", "val", 8), ("test", "test", 8)):
        lines = (G2P_WORDS / f"cmudict_{split}.tsv").read_text(encoding="utf-8").splitlines()
        assert all(len(line.split("\t")) == 2 for line in lines[:count])
        (project / f"{name}.tsv").write_text("\n".join(lines[:count]) + "\n", encoding="utf-8")
    return project


def g2p_plan_command(max_steps: int) -> list[str]:
    """The plan's `train` command line, plus what keeps the run small and in the project."""
    import yaml

    data = yaml.safe_load(G2P_CONFIG.read_text(encoding="utf-8"))["data"]["options"]
    assert data["test_file"], "the config scores a test split: the test names a small one"
    return [
        "train", "config/g2p_cmudict.yaml",
        # the DGX Spark plan's flags
        "--data_file", "t.tsv", "--report_to", "tensorboard",
        "--max_steps", str(max_steps), "--save_steps", "5",
        # small and quick: eval and test splits, a tiny model created on first use, 1 thread
        "--eval_file", "v.tsv", "--set", "data.options.test_file=test.tsv",
        "--model_name_or_path", "models/tiny-g2p", "--set", "model.init_size=tiny",
        "--profile", "cpu", "--num_threads", "1", "--batch_size", "8",
        "--max_new_tokens", "8",
    ]  # fmt: skip


def train_g2p(project: Path, argv: list[str]) -> Path:
    """A G2P project (`g2p_project`) trained by `argv` (the plan's command) in this process;
    the project folder (its run under runs/g2p_cmudict-t)."""
    from fakes.in_process import run_main

    g2p_project(project)
    ran = run_main(*argv, cwd=project)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
    return project
