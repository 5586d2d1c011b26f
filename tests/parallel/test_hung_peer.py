"""A hung peer: rank 1 of a two-process Gloo run stopped with SIGSTOP after a checkpoint.
Rank 0 ends within `hardware.distributed_timeout_s` with one line naming the silent rank,
the checkpoint stays intact, and once the stopped rank is ended `--resume` finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trainforge.engine import checkpoint as ckpt

pytestmark = pytest.mark.dist
REPO = Path(__file__).resolve().parents[2]
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "logging.progress_bar=false", "logging.tensorboard=false", "hardware.telemetry=false",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "training.num_threads=1", "training.device=cpu",
    "checkpoint.save_steps=5", "hardware.distributed_timeout_s=20",
]  # fmt: skip
ENV = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def command(tmp_path: Path, steps: int, *extra: str) -> list[str]:
    sets = [*TINY, f"output.dir={tmp_path}", "output.run_name=hung", f"training.max_steps={steps}"]
    args = [a for s in sets for a in ("--set", s)]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    return [
        *launch,
        "-m",
        "trainforge",
        "train",
        str(REPO / "config/vit_digits.yaml"),
        *args,
        *extra,
    ]


def test_a_stopped_rank_is_named_by_the_other_within_the_timeout(tmp_path):
    proc = subprocess.Popen(
        command(tmp_path, 100000), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=ENV,
    )  # fmt: skip
    root = tmp_path / "hung" / "checkpoints"
    deadline = time.monotonic() + 600
    while not (root.exists() and any(p.name.startswith("checkpoint-") for p in root.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
               if "trainforge" in " ".join(c.cmdline())]  # fmt: skip
    victim = next(w for w in workers if w.environ().get("RANK") == "1")
    victim.send_signal(signal.SIGSTOP)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        if victim.is_running():
            victim.send_signal(signal.SIGKILL)  # a stopped process ends on SIGKILL too
    assert proc.returncode != 0
    lines = [line for line in err.splitlines() if "stopped answering" in line]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("rank 0: rank 1 stopped answering")
    assert "hardware.distributed_timeout_s = 20 s" in lines[0]
    assert f"`trainforge train --resume {tmp_path / 'hung'}`" in lines[0]
    assert "Traceback" not in out
    found = ckpt.list_checkpoints(root)
    assert found and all(ckpt.verify(c.path) is None for c in found)

    resumed = subprocess.run(
        command(tmp_path, found[-1].global_step + 5, "--resume", "auto"),
        capture_output=True, text=True, timeout=600, env=ENV,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {found[-1].path}" in resumed.stdout
    summary = json.loads((tmp_path / "hung" / "summary.json").read_text())
    assert summary["global_step"] == found[-1].global_step + 5
