"""The facts detection produces (`Platform` and its parts) and what it reads (`Probe`).

This module owns the data shapes only: no file, environment or NVML access happens here,
so every other module (and the CLI) can import it for free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class GpuInfo:
    """One GPU. `memory_gib` is 0.0 when the driver could not say (reported as unknown)."""

    index: int
    name: str
    memory_gib: float
    compute_capability: tuple[int, int] | None

    def describe(self) -> str:
        memory = f"{self.memory_gib:.1f} GiB" if self.memory_gib > 0 else "memory unknown"
        cc = self.compute_capability
        compute = f"compute {cc[0]}.{cc[1]}" if cc else "compute unknown"
        return f"GPU {self.index}: {self.name}, {memory}, {compute}"


@dataclass(frozen=True)
class JetsonInfo:
    """A Jetson board. `l4t_version` is "unknown" when nv_tegra_release was unreadable."""

    model: str
    l4t_version: str
    jetpack_version: str | None

    @property
    def is_orin(self) -> bool:
        return "orin" in self.model.lower()


@dataclass(frozen=True)
class SlurmInfo:
    """The Slurm allocation this process runs inside."""

    job_id: str
    num_nodes: int
    num_tasks: int
    gpus_per_node: int | None
    node_rank: int | None
    partition: str | None
    nodelist: str | None

    def describe(self) -> str:
        parts = [_plural(self.num_nodes, "node"), _plural(self.num_tasks, "task")]
        if self.gpus_per_node is not None:
            parts.append(f"{_plural(self.gpus_per_node, 'GPU')} per node")
        if self.partition:
            parts.append(f"partition {self.partition}")
        if self.node_rank is not None:
            parts.append(f"this is node {self.node_rank}")
        return f"Slurm job {self.job_id}: " + ", ".join(parts)


@dataclass(frozen=True)
class Platform:
    """What machine we run on; `device` is what `training.device: auto` resolves to."""

    kind: str
    device: str
    arch: str
    os_name: str
    cpu_count: int
    memory_gib: float
    gpus: tuple[GpuInfo, ...]
    jetson: JetsonInfo | None
    slurm: SlurmInfo | None
    # What bounds `memory_gib`: "host" (its RAM) or the cgroup limit a container or Slurm set.
    memory_source: str = "host"

    def describe(self) -> list[str]:
        """Human-readable lines for `trainforge detect`, most important first."""
        lines = [
            f"platform: {self._headline()}",
            f"device: {self.device} ({self.arch}, {self.os_name})",
        ]
        if self.jetson is not None:
            jetpack = self.jetson.jetpack_version or "unknown"
            lines.append(f"L4T {self.jetson.l4t_version}, JetPack {jetpack}")
        lines.extend(gpu.describe() for gpu in self.gpus)
        if self.slurm is not None:
            lines.append(self.slurm.describe())
        memory = f"RAM {self.memory_gib:.1f} GiB"
        if self.memory_source != "host":
            memory = f"memory {self.memory_gib:.2f} GiB ({self.memory_source})"
        lines.append(f"CPU: {self.cpu_count} cores, {memory}")
        return lines

    def _headline(self) -> str:
        if self.kind == "jetson" and self.jetson is not None:
            return f"Jetson ({self.jetson.model})"
        if self.kind == "dgx-spark":
            return "DGX Spark (NVIDIA GB10, unified memory)"
        if self.kind == "cuda":
            return f"CUDA ({_plural(len(self.gpus), 'GPU')})"
        if self.kind == "mps":
            return "Apple Silicon (MPS)"
        return "CPU only"


@dataclass(frozen=True)
class Probe:
    """Everything detection reads, injectable for tests.

    Files are read as `root / "etc/nv_tegra_release"`, `root / "proc/device-tree/model"` and
    `root / "proc/meminfo"`. A `None` field means "ask the real machine".
    """

    root: Path = Path("/")
    # A factory, not a plain default: dataclasses refuse unhashable defaults such as os.environ.
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    machine: str | None = None
    system: str | None = None
    cpu_count: int | None = None
    gpus: tuple[GpuInfo, ...] | None = None
    mps_available: bool | None = None


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
