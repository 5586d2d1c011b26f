"""Reading the Slurm allocation from SLURM_* variables."""

from __future__ import annotations

import pytest

from trainforge.hardware import parse_gpu_count, read_slurm


@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("4", 4),
        ("gpu:4", 4),
        ("a100:4", 4),
        ("gpu:a100:4", 4),
        ("a100:2,v100:2", 4),
        ("4(x2)", 4),
        ("", None),
        (None, None),
        ("gpu:lots", None),
    ],
)
def test_parse_gpu_count(value: str | None, count: int | None) -> None:
    assert parse_gpu_count(value) == count


def test_no_job_id_means_no_slurm() -> None:
    assert read_slurm({}) is None
    assert read_slurm({"SLURM_JOB_ID": "  ", "SLURM_NNODES": "2"}) is None


def test_full_allocation() -> None:
    info = read_slurm(
        {
            "SLURM_JOB_ID": "77",
            "SLURM_NNODES": "3",
            "SLURM_NTASKS": "12",
            "SLURM_GPUS_PER_NODE": "gpu:4",
            "SLURM_NODEID": "2",
            "SLURM_JOB_PARTITION": "booster",
            "SLURM_JOB_NODELIST": "n[1-3]",
        }
    )
    assert info is not None
    assert (info.job_id, info.num_nodes, info.num_tasks) == ("77", 3, 12)
    assert (info.gpus_per_node, info.node_rank) == (4, 2)
    assert (info.partition, info.nodelist) == ("booster", "n[1-3]")


def test_gpus_on_node_wins_over_request() -> None:
    info = read_slurm({"SLURM_JOB_ID": "1", "SLURM_GPUS_ON_NODE": "2", "SLURM_GPUS_PER_NODE": "8"})
    assert info is not None
    assert info.gpus_per_node == 2


def test_minimal_and_garbled_values_default_sensibly() -> None:
    info = read_slurm({"SLURM_JOB_ID": "5", "SLURM_JOB_NUM_NODES": "two", "SLURM_NODEID": "x"})
    assert info is not None
    assert (info.num_nodes, info.num_tasks) == (1, 1)
    assert (info.gpus_per_node, info.node_rank, info.partition, info.nodelist) == (
        None,
        None,
        None,
        None,
    )
    assert info.describe() == "Slurm job 5: 1 node, 1 task"
