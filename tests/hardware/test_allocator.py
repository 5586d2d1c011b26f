"""The host allocator of a training process: glibc keeps what a step frees for the next step
once `tune_host_allocator` has run, a user's own malloc settings are left alone, and
`trainforge train` tunes before its data and model take memory.

The fault counts are the kernel's (`getrusage`), not timings: a block handed back to the
kernel is faulted in again page by page when the next step allocates it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.fakes.cli_args import DIGITS_TINY
from tests.fakes.in_process import run_in_process

from trainforge.hardware import allocator

glibc = pytest.mark.skipif(
    allocator._mallopt() is None, reason="mallopt is glibc's; this C library has none"
)

# Allocate and free a 4 MiB tensor 200 times, as a training step does with its activations;
# print the minor page faults of the loop. `setup` runs first.
CHILD = """
import resource, torch
from trainforge.hardware import allocator
{setup}
torch.empty(1 << 20).fill_(1.0)  # 4 MiB once, so the loop starts from a warm heap
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    torch.empty(1 << 20).fill_(1.0)
print("faults", resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
# What glibc does in a process whose history never raised its thresholds: every block of
# 128 KiB or more is mapped afresh and handed back on free.
UNTUNED = "allocator._mallopt()(allocator.M_MMAP_THRESHOLD, 128 * 1024)"
TUNED = "assert allocator.tune_host_allocator(env={})"


def child_faults(setup: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(setup=setup)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    return int(out.split("faults")[-1])


@glibc
def test_a_tuned_process_keeps_what_a_step_frees_for_the_next_step():
    untuned, tuned = child_faults(UNTUNED), child_faults(TUNED)
    pages = 200 * (4 << 20) // 4096  # every page of every block, had each been mapped afresh
    assert untuned > pages // 2  # the control: each block faulted in again
    assert tuned < pages // 20, (tuned, untuned)


def test_a_users_own_malloc_settings_are_left_alone(monkeypatch):
    assert allocator.user_settings({"MALLOC_TRIM_THRESHOLD_": "0"}) == "MALLOC_TRIM_THRESHOLD_"
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}
    assert allocator.user_settings(tunables) == "GLIBC_TUNABLES"
    assert allocator.user_settings({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}) is None
    calls = []
    monkeypatch.setattr(allocator, "_mallopt", lambda: lambda *a: calls.append(a) or 1)
    assert allocator.tune_host_allocator(env=tunables) is False and calls == []
    assert allocator.tune_host_allocator(env={}) is True
    assert calls == [(allocator.M_MMAP_THRESHOLD, 32 << 20), (allocator.M_TRIM_THRESHOLD, 64 << 20)]


def test_another_c_library_is_a_no_op(monkeypatch):
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator._mallopt() is None
    assert allocator.tune_host_allocator(env={}) is False


def test_trainforge_train_tunes_before_the_data_loads(monkeypatch, capsys, tmp_path):
    import trainforge.tasks

    order = []
    monkeypatch.setattr(allocator, "tune_host_allocator", lambda: order.append("tune"))
    build = trainforge.tasks.build_task
    monkeypatch.setattr(
        trainforge.tasks, "build_task", lambda *a, **k: order.append("data") or build(*a, **k)
    )
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", *DIGITS_TINY, "--max_steps", "1",
        "--set", f"output.dir={tmp_path}", "--set", "output.run_name=tuned",
    )  # fmt: skip
    assert code == 0, out[-2000:] + err[-2000:]
    assert order[:2] == ["tune", "data"]
