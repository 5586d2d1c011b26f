"""Platform detection: turning a `Probe` (files, environment, NVML) into a `Platform`, and
the profile `profile: auto` picks for it.

The profile choice reads the `detect:` rules each registered profile carries
(`trainforge.registry.PROFILES`, see `trainforge.profiles.DetectRule`): the hardware facts
live here, the thresholds and name markers in the profiles, so a new profile brings its own
rule. Also owns recorded fixtures: a folder holding real-format files plus `probe.json`,
loaded with `load_fixture` so that `detect` can be replayed for machines we do not have.
"""

from __future__ import annotations

import json
import os
import platform as _stdlib_platform
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.hardware import nvml
from trainforge.hardware.jetson import read_jetson, read_text, synthesize_gpu
from trainforge.hardware.platform import GpuInfo, JetsonInfo, Platform, Probe
from trainforge.hardware.slurm import read_slurm
from trainforge.registry import PROFILES

MEMINFO = "proc/meminfo"
_MEMTOTAL_RE = re.compile(r"^MemTotal:\s*(\d+)\s*kB\s*$", re.MULTILINE)
_DEVICE_FOR_KIND = {
    "jetson": "cuda",
    "dgx-spark": "cuda",
    "cuda": "cuda",
    "mps": "mps",
    "cpu": "cpu",
}


def detect(probe: Probe | None = None) -> Platform:
    """Find out what machine we run on. Never imports torch; never raises on odd files.

    `memory_gib` is what this process may use: the host's RAM or its cgroup's limit."""
    probe = probe or Probe()
    machine = probe.machine if probe.machine is not None else _stdlib_platform.machine()
    system = probe.system if probe.system is not None else _stdlib_platform.system().lower()
    memory_gib, memory_source = _memory_budget_gib(probe.root)
    gpus = probe.gpus if probe.gpus is not None else nvml.query_nvml_gpus()
    jetson = read_jetson(probe.root)
    mps = probe.mps_available
    if mps is None:
        mps = system == "darwin" and machine == "arm64"
    kind, gpus = _classify(machine, gpus, jetson, mps, memory_gib)
    return Platform(
        kind=kind,
        device=_DEVICE_FOR_KIND[kind],
        arch=machine,
        os_name=system,
        cpu_count=probe.cpu_count or os.cpu_count() or 1,
        memory_gib=memory_gib,
        gpus=gpus,
        jetson=jetson,
        slurm=read_slurm(probe.env),
        memory_source=memory_source,
    )


def _memory_budget_gib(root: Path) -> tuple[float, str]:
    """The host's RAM, or a tighter cgroup limit (container, Slurm `--mem`), in GiB."""
    from trainforge.hardware.limits import memory_budget

    host_gib = read_memory_gib(root)
    budget = memory_budget(host_gib * 1024**3, root)
    if budget.source == "host":
        return host_gib, "host"
    return round(budget.value / 1024**3, 2), budget.source


def _classify(
    machine: str,
    gpus: tuple[GpuInfo, ...],
    jetson: JetsonInfo | None,
    mps: bool,
    memory_gib: float,
) -> tuple[str, tuple[GpuInfo, ...]]:
    """The platform kind, and the GPU list with unified-memory sizes filled in."""
    if jetson is not None:
        if not gpus:
            return "jetson", (synthesize_gpu(jetson, memory_gib),)
        return "jetson", _fill_unknown_memory(gpus, memory_gib)
    if machine.lower() in ("aarch64", "arm64") and any("GB10" in gpu.name for gpu in gpus):
        return "dgx-spark", _fill_unknown_memory(gpus, memory_gib)
    if gpus:
        return "cuda", gpus
    if mps:
        return "mps", ()
    return "cpu", ()


def profile_for(platform: Platform) -> tuple[str, str]:
    """The registered profile whose `detect:` rule of lowest rank holds, and its reason."""
    rules = sorted(
        (rule.rank, name, rule) for name, entry in PROFILES.items() for rule in entry.profile.detect
    )
    facts = _facts(platform)
    for _, name, rule in rules:
        if _holds(rule, platform):
            return name, rule.reason.format(**facts)
    raise AssertionError("no profile rule holds (the cpu profile has a catch-all rule)")


def _holds(rule: Any, p: Platform) -> bool:
    jetson = p.jetson
    smallest = min((gpu.memory_gib for gpu in p.gpus), default=0.0)
    names = [gpu.name for gpu in p.gpus]
    checks = (
        not rule.platform or p.kind in rule.platform,
        rule.jetson_orin is None or (jetson is not None and jetson.is_orin == rule.jetson_orin),
        not rule.gpu_name_any or any(m in n for n in names for m in rule.gpu_name_any),
        rule.slurm is None or (p.slurm is not None) == rule.slurm,
        rule.min_gpu_memory_gib is None or (bool(p.gpus) and smallest >= rule.min_gpu_memory_gib),
    )
    return all(checks)


def _facts(p: Platform) -> dict[str, Any]:
    jetson = p.jetson
    release = ""
    if jetson is not None:
        release = f"JetPack {jetson.jetpack_version or 'unknown'} (L4T {jetson.l4t_version})"
    return {
        "gpus": f"{len(p.gpus)}x {', '.join(sorted({gpu.name for gpu in p.gpus}))}",
        "smallest_gpu_gib": min((gpu.memory_gib for gpu in p.gpus), default=0.0),
        "arch": p.arch,
        "memory_gib": p.memory_gib,
        "slurm_job_id": p.slurm.job_id if p.slurm is not None else "",
        "jetson_model": jetson.model if jetson is not None else "",
        "release": release,
    }


def _fill_unknown_memory(gpus: tuple[GpuInfo, ...], memory_gib: float) -> tuple[GpuInfo, ...]:
    # Unified memory: NVML reports no dedicated size, but the GPU can use all system RAM.
    return tuple(gpu if gpu.memory_gib > 0 else replace(gpu, memory_gib=memory_gib) for gpu in gpus)


def read_memory_gib(root: Path) -> float:
    """Total RAM in GiB from `<root>/proc/meminfo`, falling back to psutil when unusable."""
    text = read_text(root / MEMINFO)
    match = _MEMTOTAL_RE.search(text) if text is not None else None
    if match is not None and int(match.group(1)) > 0:
        return round(int(match.group(1)) / 1024**2, 2)
    try:
        import psutil  # lazy: only needed off Linux or on odd /proc
    except ImportError:
        return 0.0
    return round(psutil.virtual_memory().total / 1024**3, 2)


def load_fixture(path: Path) -> Probe:
    """A `Probe` replaying the recorded machine in `path` (real-format files + probe.json).

    probe.json holds "machine", "system", "cpu_count", "env", "gpus" and "mps_available";
    a missing "gpus" or "env" means none, so a fixture never reads this machine's NVML or
    environment.
    """
    path = Path(path)
    probe_file = path / "probe.json"
    try:
        data = json.loads(probe_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(
            f"cannot read hardware fixture {probe_file}: {exc}",
            fix="record a probe.json next to the fixture's etc/ and proc/ folders",
        ) from exc
    if not isinstance(data, dict):
        raise UserError(
            f"hardware fixture {probe_file} is not a JSON object", fix="see load_fixture"
        )
    try:
        return Probe(
            root=path,
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            machine=data.get("machine"),
            system=data.get("system"),
            cpu_count=data.get("cpu_count"),
            gpus=tuple(_gpu_from_json(i, gpu) for i, gpu in enumerate(data.get("gpus") or [])),
            mps_available=data.get("mps_available"),
        )
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise UserError(
            f"hardware fixture {probe_file} has a malformed field: {exc!r}",
            fix="see load_fixture for the expected keys",
        ) from exc


def _gpu_from_json(position: int, gpu: dict[str, Any]) -> GpuInfo:
    cc = gpu.get("compute_capability")
    if isinstance(cc, str):  # allow "8.0" as well as [8, 0]
        cc = cc.split(".")
    return GpuInfo(
        index=int(gpu.get("index", position)),
        name=str(gpu["name"]),
        memory_gib=float(gpu.get("memory_gib") or 0.0),
        compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
    )
