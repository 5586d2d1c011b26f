"""The benchmarks' per-case peak memory: VmHWM reset at the start of a case sees what the case
allocates and not what was allocated (and freed) before; child processes are measured when the
case names them; without a writable clear_refs the lifetime peak is reported and labelled."""

from __future__ import annotations

import mmap
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import common

MIB = 2**20
proc_only = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc (clear_refs, VmHWM)"
)


def _touch_and_free(size: int) -> None:
    """Map `size` anonymous bytes, write every page (resident), unmap (returned to the OS)."""
    block = mmap.mmap(-1, size)
    for offset in range(0, size, mmap.PAGESIZE):
        block[offset] = 1
    block.close()


@proc_only
def test_reset_forgets_an_earlier_peak_and_the_case_sees_its_own_allocation():
    _touch_and_free(256 * MIB)  # before the case: raises VmHWM, then freed
    before_reset = common.peak_rss_bytes()
    with common.MemoryMeter() as idle:
        pass
    assert idle.result.method == "VmHWM"
    # Without the reset the earlier 256 MiB would still be the peak.
    assert idle.result.rss_mib * MIB < before_reset - 200 * MIB
    assert idle.result.rss_growth_mib < 32
    with common.MemoryMeter() as busy:
        held = torch.ones(128 * MIB // 4)  # 128 MiB, written, so resident
    assert busy.result.rss_growth_mib >= 120
    assert busy.result.rss_mib >= idle.result.rss_mib + 120
    assert busy.result.children_mib is None and busy.result.cuda_mib is None
    del held


@proc_only
def test_named_child_processes_are_measured_from_the_reset():
    code = (
        "import mmap, sys\n"
        "b = mmap.mmap(-1, 96 << 20)\n"
        "for o in range(0, 96 << 20, mmap.PAGESIZE): b[o] = 1\n"
        "b.close()\n"  # the child's own earlier peak, freed before the case
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "c = mmap.mmap(-1, 64 << 20)\n"
        "for o in range(0, 64 << 20, mmap.PAGESIZE): c[o] = 1\n"
        "print('done', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        with common.MemoryMeter(children=lambda: [child.pid]) as meter:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"
        assert 64 <= meter.result.children_mib < 96
        with common.MemoryMeter() as unnamed:
            pass
        assert unnamed.result.children_mib is None
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_without_a_writable_clear_refs_it_reports_the_lifetime_peak_and_says_so(monkeypatch):
    monkeypatch.setattr(common, "CLEAR_REFS", "/nonexistent/{pid}/clear_refs")
    with common.MemoryMeter() as meter:
        pass
    assert meter.result.method.startswith("ru_maxrss")
    assert "clear_refs not writable" in common.memory_note(meter.result)
    current = common.current_rss_bytes()
    if current is not None:  # the lifetime peak is at least what is resident now
        assert meter.result.rss_mib * MIB >= current * 0.99


def test_alternate_rotates_the_order_every_round():
    calls: list[str] = []
    common.alternate({n: (lambda n=n: calls.append(n) or 0.0) for n in "abc"}, repeats=3)
    assert calls == list("abcbcacab")


@pytest.mark.gpu
def test_cuda_peak_is_reset_per_case():
    device = torch.device("cuda")
    before = torch.empty(512 * MIB, dtype=torch.uint8, device=device)
    del before
    with common.MemoryMeter(device) as small:
        pass
    with common.MemoryMeter(device) as large:
        held = torch.empty(256 * MIB, dtype=torch.uint8, device=device)
    assert small.result.cuda_mib < 64
    assert 256 <= large.result.cuda_mib < 512
    del held
