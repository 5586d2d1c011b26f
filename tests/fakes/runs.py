"""Real digits runs for the tests, in one place: the tiny ViT's settings, the one-thread block
and the in-process trainer (`trainforge.train.train`, the path `trainforge train` takes).

tests/conftest.py trains the session's shared run from here (`digits_run`); a test that needs
a run of its own calls `train_digits`. Runs draw no report (`logging.report: false`) unless
a test asks for one: matplotlib's plots cost more than the few steps such a run trains.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "config" / "vit_digits.yaml"
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
