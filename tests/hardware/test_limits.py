"""Memory and CPU budgets under container and Slurm limits: cgroup v1 and v2 fixture trees
(real file formats, under an injected root) and the CPU affinity set."""

from __future__ import annotations

from pathlib import Path

from trainforge.hardware import limits
from trainforge.hardware.detect import detect
from trainforge.hardware.platform import Probe
from trainforge.hardware.threads import thread_budget

GIB = 1024**3
HOST = 16 * GIB


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def v2_tree(root: Path, memory_max: str, cpu_max: str, leaf: str = "max") -> Path:
    """A Slurm-like v2 hierarchy: the job's folder limits, its step's folder does not."""
    return write(
        root,
        {
            "proc/self/cgroup": "0::/system.slice/slurmstepd.scope/job_7/step_0",
            "proc/meminfo": "MemTotal:       16777216 kB",
            "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids",
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max": memory_max,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/cpu.max": cpu_max,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/memory.max": leaf,
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/cpu.max": "max 100000",
        },
    )


def v1_tree(root: Path, limit: int, quota: int, cgroup_path: str = "/docker/abc") -> Path:
    """A Docker-like v1 hierarchy: the container's cgroup mounted as the controller's root."""
    return write(
        root,
        {
            "proc/self/cgroup": (f"12:memory:{cgroup_path}\n4:cpu,cpuacct:{cgroup_path}\n0::/"),
            "proc/meminfo": "MemTotal:       16777216 kB",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": str(limit),
            "sys/fs/cgroup/memory/memory.usage_in_bytes": str(GIB // 2),
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": str(quota),
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000",
        },
    )


def test_cgroup_v2_memory_max_and_cpu_max_bind_from_a_parent(tmp_path):
    root = v2_tree(tmp_path, str(3 * GIB // 2), "150000 100000")
    budget = limits.memory_budget(HOST, root)
    assert budget == limits.Budget(1.5 * GIB, "cgroup v2 limit")
    assert budget.describe_gib() == "1.50 GiB (cgroup v2 limit)"
    cpus = limits.cpu_budget(root, affinity=64, host_cpus=64)
    assert cpus == limits.Budget(2.0, "cgroup v2 CPU quota")  # 1.5 CPUs run 2 threads


def test_unlimited_cgroups_leave_the_host_totals(tmp_path):
    root = v2_tree(tmp_path, "max", "max 100000")
    assert limits.memory_budget(HOST, root) == limits.Budget(HOST, "host")
    assert limits.cpu_budget(root, affinity=8, host_cpus=8).source == "host"
    v1 = v1_tree(tmp_path / "v1", 9223372036854771712, -1)
    assert limits.memory_budget(HOST, v1).source == "host"
    assert limits.cpu_budget(v1, affinity=8, host_cpus=8).source == "host"


def test_cgroup_v1_limit_and_quota_of_a_container(tmp_path):
    root = v1_tree(tmp_path, 3 * GIB // 2, 100000)
    assert limits.memory_budget(HOST, root) == limits.Budget(1.5 * GIB, "cgroup limit")
    assert limits.cpu_budget(root, affinity=8, host_cpus=8) == limits.Budget(
        1.0, "cgroup CPU quota"
    )
    # what more may be allocated: the limit less the cgroup's use, not the host's free RAM
    assert limits.memory_available(12 * GIB, root) == GIB
    # a host-wide view (the process's own cgroup folder exists) reads that folder
    write(tmp_path, {"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": str(GIB)})
    assert limits.memory_budget(HOST, root).value == GIB


def test_the_affinity_set_bounds_cpus_as_slurm_binds_them(tmp_path):
    root = v2_tree(tmp_path, "max", "max 100000")
    budget = limits.cpu_budget(root, affinity=1, host_cpus=8)
    assert budget == limits.Budget(1.0, "CPU affinity")
    threads, source = thread_budget(None, env={}, cores=1, default_threads=8, others=0)
    assert threads == 1 and "1 of 8 cores" in source


def test_detect_reports_the_cgroup_limit_as_the_memory_the_run_has(tmp_path):
    root = v2_tree(tmp_path, str(3 * GIB // 2), "max 100000")
    platform = detect(Probe(root=root, env={}, machine="x86_64", system="linux", gpus=()))
    assert platform.memory_gib == 1.5 and platform.memory_source == "cgroup v2 limit"
    assert "memory 1.50 GiB (cgroup v2 limit)" in platform.describe()[-1]
    free = detect(Probe(root=v2_tree(tmp_path / "free", "max", "max 100000"), env={},
                        machine="x86_64", system="linux", gpus=()))  # fmt: skip
    assert free.memory_gib == 16.0 and free.memory_source == "host"
    assert "RAM 16.0 GiB" in free.describe()[-1]


def test_unreadable_or_odd_cgroup_files_fall_back_to_the_host(tmp_path):
    root = write(
        tmp_path,
        {
            "proc/self/cgroup": "garbage\n0::/a",
            "sys/fs/cgroup/cgroup.controllers": "memory",
            "sys/fs/cgroup/a/memory.max": "lots",
            "sys/fs/cgroup/a/cpu.max": "1 2 3",
        },
    )
    assert limits.memory_budget(HOST, root).source == "host"
    assert limits.memory_available(GIB, root) == GIB
    assert "quota" not in limits.cpu_budget(root, affinity=1).source
