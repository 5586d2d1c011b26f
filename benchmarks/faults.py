"""A fault campaign: every real fault the product promises to survive, tried N times on a tiny
digits run through the real `trainforge train` (root: tmpfs mounts, cgroups, signals).

Faults: a full disk and a read-only remount of the run folder mid-run (a 4 MB tmpfs, filled
or remounted from outside once a checkpoint has landed), the kernel's OOM killer (a cgroup v1
memory limit and a thread that hoards memory after the first checkpoint), one flipped byte in
`model.safetensors` and in `state.pt`, and a hung peer (SIGSTOP of rank 1 in a two-process
Gloo run). Each try counts as

- survived: the run ended as promised (one line and exit 2 for a disk; the OOM named at the
  next start; the damaged checkpoint skipped in one line; the silent rank named) and the
  resume finished the run;
- data lost: a checkpoint that verified before the fault no longer verifies, or the resume
  did not continue from the newest checkpoint that verified.

Prints faults tried / survived / data lost per fault and in all. `python benchmarks/faults.py
[N]` runs it alone (N: tries per fault, default 2; `FAULTS_N` for `make bench`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from fakes.cgroups import cgroup_v1  # noqa: E402
from fakes.cli_args import DIGITS_TINY  # noqa: E402
from trainforge.engine import checkpoint as ckpt  # noqa: E402

TRAIN = [sys.executable, "-m", "trainforge", "train"]
HOG = REPO / "tests" / "fakes" / "hog"
ENV = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


class Outcome:
    def __init__(self, survived: bool, lost: bool, note: str = "") -> None:
        self.survived, self.lost, self.note = survived, lost, note


def _args(out: Path, steps: int, *extra: str) -> list[str]:
    sets = ["--set", f"output.dir={out}", "--set", f"training.max_steps={steps}"]
    return [*TRAIN, *DIGITS_TINY, *sets, "--set", "training.num_threads=1", *extra]


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the run ended before {path.name}: {proc.communicate()[1][-500:]}")
        time.sleep(0.02)


def _verified(root: Path) -> dict[str, bool]:
    ckpt._VERIFIED.clear()
    if not root.is_dir():
        return {}
    return {p.name: ckpt.verify(p) is None for p in root.iterdir() if p.name.startswith("check")}


def _resume(out: Path, steps: int, command: list[str] | None = None) -> tuple[bool, str]:
    """`trainforge train --resume RUN` (or `command`): whether it finished at `steps`."""
    run = out / "vit_digits"
    done = subprocess.run(
        command or [*TRAIN, "--resume", str(run)], capture_output=True, text=True, env=ENV
    )
    summary = run / "summary.json"
    finished = done.returncode == 0 and json.loads(summary.read_text())["global_step"] == steps
    return finished, done.stdout


def _lost(before: dict[str, bool], after: dict[str, bool], resumed_out: str, root: Path) -> bool:
    good_before = [name for name, ok in before.items() if ok]
    newest = max(good_before, key=lambda n: int(n.split("-")[-1]), default=None)
    gone_bad = any(not after.get(name, True) for name in good_before)
    return gone_bad or (newest is not None and f"resumed from {root / newest}" not in resumed_out)


@contextlib.contextmanager
def _tmpfs(folder: Path):
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> None:
    with (folder / "filler").open("wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * (1 << 16))


def _remount_ro(folder: Path) -> None:
    """Read-only as soon as no file is open for writing (a write in flight: EBUSY, retried)."""
    deadline = time.monotonic() + 60
    while subprocess.run(["mount", "-o", "remount,ro", str(folder)]).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{folder} stayed busy")
        time.sleep(0.01)


def _disk_fault(work: Path, fault: Callable[[Path], None], reason: str) -> Outcome:
    with _tmpfs(work / "disk") as disk:
        root = disk / "vit_digits" / "checkpoints"
        proc = subprocess.Popen(
            _args(disk, 400), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
        )
        _wait_for(root / "checkpoint-2", proc)
        fault(disk)
        _out, err = proc.communicate(timeout=600)
        before = _verified(root)
        lines = err.strip().splitlines()
        one_line = proc.returncode == 2 and len(lines) == 1 and reason in lines[0]
        subprocess.run(["mount", "-o", "remount,rw,size=64m", str(disk)], check=True)
        finished, resumed_out = _resume(disk, 400)
        leftovers = [p.name for p in root.iterdir() if p.name.startswith(".")]
        lost = _lost(before, _verified(root), resumed_out, root)
        return Outcome(one_line and finished and not leftovers, lost, err.strip()[:200])


def full_disk(work: Path) -> Outcome:
    return _disk_fault(work, _fill, "No space left on device")


def read_only_disk(work: Path) -> Outcome:
    return _disk_fault(work, _remount_ro, "Read-only file system")


def oom_kill(work: Path) -> Outcome:
    run = work / "vit_digits"
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(HOG), os.environ.get("PYTHONPATH", "")]))
    env["TRAINFORGE_TEST_HOG_AFTER"] = str(run / "checkpoints" / "checkpoint-2")
    with cgroup_v1(memory_bytes=3 << 28) as groups:
        killed = subprocess.run(
            groups.command(_args(work, 30)), capture_output=True, text=True, env=env
        )
        before = _verified(run / "checkpoints")
        finished, out = _resume(work, 30)
    named = killed.returncode == -signal.SIGKILL and "killed: out of memory (limit" in out
    lost = _lost(before, _verified(run / "checkpoints"), out, run / "checkpoints")
    return Outcome(named and finished, lost, killed.stderr[-200:])


def _flip(name: str) -> Callable[[Path], Outcome]:
    def flipped_byte(work: Path) -> Outcome:
        root = work / "vit_digits" / "checkpoints"
        done = subprocess.run(_args(work, 6), capture_output=True, text=True, env=ENV)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-500:])
        path = root / "checkpoint-6" / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
        before = _verified(root)
        finished, out = _resume(work, 6)
        named = f"skipping checkpoint {root / 'checkpoint-6'}: checksum mismatch in {name}"
        lost = _lost(before, _verified(root), out, root)
        return Outcome(named in out and finished, lost)

    flipped_byte.__name__ = f"flipped byte in {name}"
    return flipped_byte


def hung_peer(work: Path) -> Outcome:
    sets = ["--set", "hardware.distributed_timeout_s=20", "--set", "training.device=cpu"]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd = [*launch, *_args(work, 100000, *sets)[1:]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    root = work / "vit_digits" / "checkpoints"
    _wait_for(root / "checkpoint-2", proc)
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
               if c.environ().get("RANK") == "1"]  # fmt: skip
    workers[0].send_signal(signal.SIGSTOP)
    try:
        _out, err = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(psutil.Error):
            workers[0].send_signal(signal.SIGKILL)
    before = _verified(root)
    newest = max((int(n.split("-")[-1]) for n, ok in before.items() if ok), default=0)
    named = "rank 1 stopped answering" in err
    again = [*launch, *_args(work, newest + 4, *sets, "--resume", "auto")[1:]]
    finished, out = _resume(work, newest + 4, again)
    return Outcome(named and finished, _lost(before, _verified(root), out, root), err[-200:])


FAULTS: list[Callable[[Path], Outcome]] = [
    full_disk, read_only_disk, oom_kill, _flip("model.safetensors"), _flip("state.pt"), hung_peer,
]  # fmt: skip


def campaign(tries: int) -> tuple[str, dict[str, float]]:
    rows, totals = [], [0, 0, 0]
    for fault in FAULTS:
        counts = [0, 0, 0]
        for _ in range(tries):
            with tempfile.TemporaryDirectory(prefix="trainforge-fault-") as work:
                try:
                    outcome = fault(Path(work))
                except Exception as err:  # a fault the campaign could not stage: not survived
                    outcome = Outcome(False, False, f"{type(err).__name__}: {err}"[:200])
            counts[0] += 1
            counts[1] += outcome.survived
            counts[2] += outcome.lost
            if not outcome.survived:
                print(f"  {fault.__name__}: not survived: {outcome.note}", flush=True)
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        rows.append((fault.__name__.replace("_", " "), *counts))
    rows.append(("all faults", *totals))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'fault'.ljust(width)}  tried  survived  data lost"]
    lines += [f"{n.ljust(width)}  {t:5d}  {s:8d}  {lost:9d}" for n, t, s, lost in rows]
    ratios = {"faults_survived_share": totals[1] / totals[0], "faults_data_lost": totals[2]}
    return "\n".join(lines), ratios


def run() -> tuple[str, dict[str, float]]:
    if os.geteuid() != 0:
        raise RuntimeError("the fault campaign needs root (tmpfs mounts, cgroups)")
    return campaign(int(os.environ.get("FAULTS_N", "2")))


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("the fault campaign needs root (tmpfs mounts, cgroups)")
    text, _ = campaign(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    print(text)
