"""The memory and CPU this process may use: the tightest of the host's totals, its cgroup's
limits (v1 and v2, as `docker run --memory/--cpus`, Slurm's `--mem`/`--cpus-per-task` and
Kubernetes limits set them) and its CPU affinity set (Slurm's cpuset binding, `taskset`).

The memory budget of `--batch_size auto`, `doctor`, the run header and the web app's System
page, and the CPU thread budget read these, so a run in a 1.5 GiB container plans for
1.5 GiB, not for the host's RAM, and is not the OOM killer's first victim.

Files are read under an injectable root (`root / "proc/self/cgroup"`, `root / "sys/fs/cgroup"`)
so that tests replay a container or a Slurm node from a fixture tree. A cgroup's limit is the
smallest along its path up to the hierarchy's root (a parent's limit binds its children).

Considered: psutil (reports the host's totals only); joblib's and loky's `cpu_count` (read the
CPU quota, but only at the hierarchy's root as a container sees it, not the process's own
cgroup from /proc/self/cgroup, and no memory limit); the `cpu-count` package (CPU only, no
release since 2019); cgroupspy (manages v1 hierarchies, no v2, no effective-limit lookup).
None gives both budgets with their source, so the few files are read here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = "sys/fs/cgroup"
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit value; anything this big
# is no limit.
_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class Budget:
    """An amount the machine gives this process and where the bound comes from."""

    value: float  # bytes for memory, CPUs for CPU
    source: str  # "host", "cgroup limit", "cgroup v2 limit", "CPU affinity", ...

    def describe_gib(self) -> str:
        return f"{self.value / 1024**3:.2f} GiB ({self.source})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_paths(root: Path) -> dict[str, str]:
    """{controller: path} from /proc/self/cgroup; the v2 (unified) entry under key ""."""
    text = _read(root / "proc/self/cgroup") or ""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _chain(mount: Path, path: str) -> list[Path]:
    """The cgroup folder of `path` under `mount` and each of its parents that exists.

    Inside a container without a cgroup namespace the path names the host's folder, which is
    not mounted there; the container's own cgroup is then the mount's root."""
    parts = [p for p in path.strip("/").split("/") if p]
    folders = [mount / Path(*parts[:i]) if i else mount for i in range(len(parts), -1, -1)]
    return [f for f in folders if f.is_dir()]


def _v2_mount(root: Path) -> Path | None:
    for mount in (root / CGROUP_ROOT, root / CGROUP_ROOT / "unified"):
        if (mount / "cgroup.controllers").is_file():
            return mount
    return None


def _smallest(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None and 0 < v < _UNLIMITED]
    return min(finite) if finite else None


def _v1_memory(root: Path, paths: dict[str, str]) -> float | None:
    if "memory" not in paths:
        return None
    values = []
    for folder in _chain(root / CGROUP_ROOT / "memory", paths["memory"]):
        text = _read(folder / "memory.limit_in_bytes")
        if text and text.isdigit():
            values.append(float(text))
    return _smallest(values)


def _v2_values(root: Path, paths: dict[str, str], name: str) -> list[str]:
    mount = _v2_mount(root)
    if mount is None or "" not in paths:
        return []
    return [t for f in _chain(mount, paths[""]) if (t := _read(f / name))]


def _v2_memory(root: Path, paths: dict[str, str]) -> float | None:
    values = [float(t) for t in _v2_values(root, paths, "memory.max") if t.isdigit()]
    return _smallest(values)


def _quota(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None  # "max": no quota
    return q / p if q > 0 and p > 0 else None


def _v1_cpus(root: Path, paths: dict[str, str]) -> float | None:
    key = "cpu" if "cpu" in paths else "cpuacct" if "cpuacct" in paths else None
    if key is None:
        return None
    mount = root / CGROUP_ROOT / "cpu"
    if not mount.is_dir():
        mount = root / CGROUP_ROOT / "cpu,cpuacct"
    values = []
    for folder in _chain(mount, paths[key]):
        quota = _read(folder / "cpu.cfs_quota_us")
        period = _read(folder / "cpu.cfs_period_us")
        if quota and period:
            values.append(_quota(quota, period))
    return _smallest(values)


def _v2_cpus(root: Path, paths: dict[str, str]) -> float | None:
    values = []
    for text in _v2_values(root, paths, "cpu.max"):
        fields = text.split()
        if len(fields) == 2:
            values.append(_quota(fields[0], fields[1]))
    return _smallest(values)


def memory_budget(host_bytes: float, root: Path = Path("/")) -> Budget:
    """The memory this process may use: `host_bytes` unless a cgroup limits it below."""
    paths = _cgroup_paths(root)
    best = Budget(float(host_bytes), "host")
    for value, source in ((_v1_memory(root, paths), "cgroup limit"),
                          (_v2_memory(root, paths), "cgroup v2 limit")):  # fmt: skip
        if value is not None and value < best.value:
            best = Budget(value, source)
    return best


def host_memory_bytes() -> float:
    import psutil

    return float(psutil.virtual_memory().total)


def memory_available(available_bytes: float, root: Path = Path("/")) -> float:
    """What more this process may allocate: the host's available memory, or what its cgroup
    limit leaves above the cgroup's current use when that is less."""
    budget = memory_budget(available_bytes, root)
    if budget.source == "host":
        return available_bytes
    paths = _cgroup_paths(root)
    used = None
    if budget.source == "cgroup limit" and "memory" in paths:
        chain = _chain(root / CGROUP_ROOT / "memory", paths["memory"])
        used = _read(chain[0] / "memory.usage_in_bytes") if chain else None
    elif "" in paths:
        current = _v2_values(root, paths, "memory.current")
        used = current[0] if current else None
    if used is None or not used.isdigit():
        return min(available_bytes, budget.value)
    return max(0.0, min(available_bytes, budget.value - float(used)))


def cpu_budget(
    root: Path = Path("/"), affinity: int | None = None, host_cpus: int | None = None
) -> Budget:
    """The CPUs this process may use: the host's, its affinity set, or its cgroup's quota
    (rounded up: a quota of 1.5 CPUs runs two threads at most at a time)."""
    host = host_cpus or os.cpu_count() or 1
    best = Budget(float(host), "host")
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # macOS has no sched_getaffinity
            affinity = host
    if affinity < best.value:
        best = Budget(float(affinity), "CPU affinity")
    paths = _cgroup_paths(root)
    for value, source in ((_v1_cpus(root, paths), "cgroup CPU quota"),
                          (_v2_cpus(root, paths), "cgroup v2 CPU quota")):  # fmt: skip
        if value is not None and math.ceil(value) < best.value:
            best = Budget(float(max(1, math.ceil(value))), source)
    return best
