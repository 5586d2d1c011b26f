"""The lazy NVML query: real answers, and every failure meaning "no NVML GPUs"."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainforge.hardware import Probe, detect, query_nvml_gpus
from trainforge.hardware import nvml as nvml_module


class FakeNVMLError(Exception):
    pass


def fake_pynvml(
    names: list[str | bytes],
    *,
    init_error: bool = False,
    memory_error: bool = False,
    count_error: bool = False,
) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    module.NVMLError = FakeNVMLError
    calls = module.calls = []

    def init() -> None:
        if init_error:
            raise FakeNVMLError("NVML Shared Library Not Found")
        calls.append("init")

    def count() -> int:
        if count_error:
            raise FakeNVMLError("Unknown Error")
        return len(names)

    def memory(_handle: int) -> SimpleNamespace:
        if memory_error:
            raise FakeNVMLError("Not Supported")
        return SimpleNamespace(total=24 * 1024**3)

    module.nvmlInit = init
    module.nvmlShutdown = lambda: calls.append("shutdown")
    module.nvmlDeviceGetCount = count
    module.nvmlDeviceGetHandleByIndex = lambda index: index
    module.nvmlDeviceGetName = lambda handle: names[handle]
    module.nvmlDeviceGetMemoryInfo = memory
    module.nvmlDeviceGetCudaComputeCapability = lambda _handle: (8, 9)
    return module


def test_reads_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_pynvml(["NVIDIA GeForce RTX 4090", b"NVIDIA GeForce RTX 3090"])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    gpus = query_nvml_gpus()
    assert [gpu.name for gpu in gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    assert [gpu.index for gpu in gpus] == [0, 1]
    assert gpus[0].memory_gib == 24.0
    assert gpus[0].compute_capability == (8, 9)
    assert module.calls == ["init", "shutdown"]


def test_pynvml_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import pynvml` raise ImportError.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert query_nvml_gpus() == ()


def test_init_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(["x"], init_error=True))
    assert query_nvml_gpus() == ()


def test_count_failure_still_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_pynvml(["x"], count_error=True)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    assert query_nvml_gpus() == ()
    assert module.calls == ["init", "shutdown"]


def test_memory_not_supported_means_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(["NVIDIA GB10"], memory_error=True))
    (gpu,) = query_nvml_gpus()
    assert gpu.name == "NVIDIA GB10"
    assert gpu.memory_gib == 0.0


def test_detect_gb10_through_nvml(monkeypatch: pytest.MonkeyPatch, fixtures_dir: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(["NVIDIA GB10"], memory_error=True))
    probe = Probe(root=fixtures_dir / "dgx-spark", env={}, machine="aarch64", system="linux")
    platform = detect(probe)
    assert platform.kind == "dgx-spark"
    assert platform.gpus[0].memory_gib == pytest.approx(119.29, abs=0.01)


def test_detect_calls_nvml_only_when_gpus_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> tuple:
        raise AssertionError("NVML must not be queried when the probe lists GPUs")

    monkeypatch.setattr(nvml_module, "query_nvml_gpus", boom)
    assert detect(Probe(env={}, machine="x86_64", system="linux", gpus=())).kind == "cpu"


def test_detect_with_failing_nvml_is_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(["x"], init_error=True))
    platform = detect(Probe(root=tmp_path, env={}, machine="x86_64", system="linux"))
    assert (platform.kind, platform.device, platform.gpus) == ("cpu", "cpu", ())
