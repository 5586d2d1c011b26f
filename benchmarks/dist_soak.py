"""Distributed soak: N consecutive 2-process torchrun runs of a short digits job (Gloo on CPU),
each checked for an abnormal exit: a non-zero torchrun status, a rank ended by a signal
(SIGABRT, SIGSEGV, ...), or a traceback on stderr. Not a timing claim: it counts crashes.

    python benchmarks/dist_soak.py [N] [--steps S] [--keep]

Each run trains a tiny ViT for S steps with one thread per process, evaluates, checkpoints
at the end and writes the report, so every teardown path (final collectives, barrier,
process-group destruction, interpreter exit) runs N times. Prints one line per run and a
summary; the exit status is 1 when any run ended abnormally. Run folders go to a temporary
folder that is deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETS = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=64",
    "training.per_device_train_batch_size=32", "training.num_threads=1", "training.device=cpu",
    "logging.progress_bar=false", "logging.tensorboard=false", "logging.logging_steps=5",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "hardware.telemetry=false", "output.overwrite=true",
]  # fmt: skip
# torchrun's own report of a rank that a signal ended, e.g. "exitcode  : -6 (pid: 123)".
WHY = re.compile(r"terminate|what\(\)|gloo|Error|error:|exitcode|rank \d+:", re.IGNORECASE)
SIGNAL_LINE = re.compile(r"exitcode\s*:\s*-(\d+)|Signal (\d+) \(SIG\w+\) received")


def one_run(
    work: Path, index: int, steps: int, timeout_s: float, log_dir: Path | None = None
) -> tuple[bool, str]:
    """(abnormal, one-line description) for one 2-process run."""
    sets = [*SETS, f"output.dir={work}", f"output.run_name=soak-{index}",
            f"training.max_steps={steps}"]  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml")]  # fmt: skip
    cmd += [a for s in sets for a in ("--set", s)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return True, f"hung: no exit within {timeout_s:.0f} s"
    seconds = time.monotonic() - start
    signals = sorted({int(a or b) for a, b in SIGNAL_LINE.findall(done.stderr)})
    traceback = "Traceback (most recent call last)" in done.stderr
    model = work / f"soak-{index}" / "model.safetensors"
    problems = []
    if done.returncode != 0:
        problems.append(f"exit {done.returncode}")
    if signals:
        problems.append("signal(s) " + ", ".join(str(s) for s in signals))
    if traceback:
        problems.append("traceback on stderr")
    if done.returncode == 0 and not model.is_file():
        problems.append("no final model")
    if not problems:
        return False, f"ok ({seconds:.1f} s)"
    # The lines that say why (C++ terminate, Gloo, a Python error), then torchrun's verdict.
    why = [line for line in done.stderr.splitlines() if WHY.search(line)][:12]
    saved = ""
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"run-{index}.log"
        log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
        saved = f", full output in {log}"
    lines = "".join(f"\n    | {line[:300]}" for line in why)
    return True, f"ABNORMAL ({', '.join(problems)}; {seconds:.1f} s{saved}):{lines}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=50)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    parser.add_argument("--log-dir", type=Path, help="write each abnormal run's output here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trainforge-soak-"))
    abnormal = 0
    start = time.monotonic()
    try:
        for index in range(1, args.runs + 1):
            bad, line = one_run(work, index, args.steps, args.timeout, args.log_dir)
            abnormal += bad
            print(f"run {index:3d}/{args.runs}: {line}", flush=True)
            if not args.keep:
                shutil.rmtree(work / f"soak-{index}", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    minutes = (time.monotonic() - start) / 60
    print(
        f"dist soak: {args.runs} runs of 2 processes (Gloo, CPU, {args.steps} steps each), "
        f"{abnormal} abnormal exit(s), {args.runs - abnormal} clean, {minutes:.1f} min"
    )
    return 1 if abnormal else 0


if __name__ == "__main__":
    sys.exit(main())
