"""Slurm: reading the job allocation from the `SLURM_*` environment variables."""

from __future__ import annotations

import re
from collections.abc import Mapping

from trainforge.hardware.platform import SlurmInfo

# A trailing repeat count such as "4(x2)" in per-node lists.
_REPEAT_RE = re.compile(r"\(x\d+\)$")


def _int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def parse_gpu_count(value: str | None) -> int | None:
    """GPUs per node from "4", "gpu:4", "a100:4", "gpu:a100:4" or "a100:2,v100:2"."""
    if not value or not value.strip():
        return None
    total = 0
    for part in value.split(","):
        count = _int_or_none(_REPEAT_RE.sub("", part.strip()).rsplit(":", 1)[-1])
        if count is None:
            return None
        total += count
    return total


def read_slurm(env: Mapping[str, str]) -> SlurmInfo | None:
    """The Slurm allocation described by `env`, or None outside a Slurm job."""
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id:
        return None
    num_nodes = _int_or_none(env.get("SLURM_JOB_NUM_NODES")) or _int_or_none(
        env.get("SLURM_NNODES")
    )
    # SLURM_GPUS_ON_NODE is what this node really got; SLURM_GPUS_PER_NODE is only the request.
    gpus = parse_gpu_count(env.get("SLURM_GPUS_ON_NODE"))
    if gpus is None:
        gpus = parse_gpu_count(env.get("SLURM_GPUS_PER_NODE"))
    return SlurmInfo(
        job_id=job_id,
        num_nodes=num_nodes or 1,
        num_tasks=_int_or_none(env.get("SLURM_NTASKS")) or 1,
        gpus_per_node=gpus,
        node_rank=_int_or_none(env.get("SLURM_NODEID")),
        partition=env.get("SLURM_JOB_PARTITION") or None,
        nodelist=env.get("SLURM_JOB_NODELIST") or None,
    )
