"""`hardware.launcher`: a single process where the profile expects Slurm or torchrun, on a
machine with several GPUs, says at start that it uses one of them and how to use all."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainforge.config import validate
from trainforge.hardware import detect, load_fixture
from trainforge.run.header import launcher_line

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "hardware" / "fixtures"
CONFIG = REPO / "config" / "vit_cifar10.yaml"


def _line(fixture: str, world: int = 1, *sets: str) -> str | None:
    platform = detect(load_fixture(FIXTURES / fixture))
    resolved = validate(CONFIG, platform=platform, overrides=list(sets))
    return launcher_line(resolved, platform, world)


def test_one_process_on_a_four_gpu_slurm_node_names_the_command_for_all_of_them():
    line = _line("slurm-a100")
    gpus = len(detect(load_fixture(FIXTURES / "slurm-a100")).gpus)
    assert gpus > 1
    assert line == (
        f"launcher: profile hpc-a100 starts this job with slurm; this one process trains on "
        f"1 of {gpus} GPUs (all of them: trainforge slurm {CONFIG} --gpus-per-node {gpus} "
        "--submit)"
    )
    torchrun = _line("slurm-a100", 1, "hardware.launcher=torchrun")
    assert f"torchrun --standalone --nproc-per-node {gpus} -m trainforge train" in torchrun


@pytest.mark.parametrize(
    ("fixture", "world", "sets"),
    [
        ("slurm-a100", 4, ()),  # already one process per GPU
        ("slurm-a100", 1, ("hardware.launcher=local",)),  # the config says one process
        ("cuda-workstation", 1, ()),  # one GPU: nothing more to use
        ("cpu", 1, ()),
    ],
)
def test_no_line_where_nothing_is_left_unused(fixture, world, sets):
    assert _line(fixture, world, *sets) is None
