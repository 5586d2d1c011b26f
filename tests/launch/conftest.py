"""Real Slurm clusters on this machine, for the `slurm` tests (`make test-slurm`, root).

The clusters themselves (daemons, configuration, network namespaces) live in
benchmarks/slurm_cluster.py, which the recovery benchmark starts as well: `slurm_cluster` is
one node (this machine), `slurm_two_nodes` is `node1` and `node2`, each slurmd in its own
network and UTS namespace. Each fixture waits for `sinfo` to show its nodes idle, and
afterwards cancels every job, waits for them to end and stops the daemons.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from slurm_cluster import (
    CRED_EXPIRE_S,
    ClusterError,
    SlurmCluster,
    single_node,
    two_nodes,
)

__all__ = ["CRED_EXPIRE_S", "SlurmCluster"]


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    try:
        with single_node(tmp_path_factory.mktemp("slurm")) as cluster:
            yield cluster
    except ClusterError as err:
        pytest.fail(str(err))


@pytest.fixture(scope="module")
def slurm_two_nodes(tmp_path_factory) -> Iterator[SlurmCluster]:
    try:
        with two_nodes(tmp_path_factory.mktemp("slurm2")) as cluster:
            yield cluster
    except ClusterError as err:
        pytest.fail(str(err))
