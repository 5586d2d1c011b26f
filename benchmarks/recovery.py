"""What a preemption costs: SIGUSR1 -> checkpoint -> requeue -> first step again, on a real
single-node Slurm (benchmarks/slurm_cluster.py starts it: root, slurm-wlm and munge).

A tiny digits job is submitted with `trainforge slurm ... --submit` (2 CPU processes under
torchrun under srun); once it trains, `scancel --signal=USR1` stops it as a time limit or a
preemption does: the run saves `checkpoint_interrupted` and requeues the job, and the
requeued job resumes by itself. Measured:

- `recovery_save_s`: the stop signal -> the checkpoint on disk (target 10 s or less);
- `recovery_s`: the stop signal -> the first step of the requeued job, minus the time the
  job sat in Slurm's queue (from its requeue to its start: `scontrol show job` SubmitTime,
  which a requeue resets, to StartTime). That wait is the cluster's (a requeued job may start
  only after its credentials expired, and then only when nodes are free), not trainforge's.
  Target 60 s or less; SkyPilot's planning assumes 3 to 12 minutes per recovery.

The times come from run.json's segments (the stopped segment's `stop_signal_at` and
`stop_saved_at`, the new one's `process_started_at`, `checkpoint_loaded_at` and
`first_step_at`) where the run wrote them, else from outside: this process's clock at
`scancel`, the checkpoint seen verified, and metrics.jsonl's time of the first step logged
after the stop (every step is logged here). The table says which.

`python benchmarks/recovery.py` runs it alone; `make bench ONLY=recovery` as a row.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from slurm_cluster import SlurmCluster, missing_requirements, single_node  # noqa: E402

MAX_STEPS = 100_000  # never reached: the job is cancelled once it trains again
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "checkpoint.save_steps=100000", "checkpoint.save_every_epochs=null",
    "checkpoint.save_best=false", "evaluation.eval_every_epochs=null",
    "logging.logging_steps=1", "logging.tensorboard=false", "logging.progress_bar=false",
    f"training.max_steps={MAX_STEPS}", "output.run_name=recovery",
]  # fmt: skip


@dataclass(frozen=True)
class Outside:
    """What this process saw, epoch seconds: the fallback where run.json has no times."""

    signal_at: float
    saved_at: float
    first_step_at: float


def _iso(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else None
    except ValueError:
        return None


def _slurm_time(text: str) -> float:
    """A Slurm time (local, no zone, 1 s resolution) as epoch seconds."""
    return datetime.fromisoformat(text).timestamp()


def queue_wait_s(job: dict[str, str]) -> float:
    """Seconds the requeued job waited in the queue: its (reset) SubmitTime -> StartTime."""
    return _slurm_time(job["StartTime"]) - _slurm_time(job["SubmitTime"])


def figures(run: dict, queue_wait: float, outside: Outside | None) -> dict[str, Any]:
    """The stop and the restart from run.json's last two segments (else `outside`):
    {"recovery_s", "recovery_save_s", "source", "phases": [(name, seconds), ...]}."""
    segments = run.get("segments") or []
    stopped, resumed = (segments[-2], segments[-1]) if len(segments) >= 2 else ({}, {})
    signal_at = _iso(stopped.get("stop_signal_at"))
    saved_at = _iso(stopped.get("stop_saved_at"))
    first_at = _iso(resumed.get("first_step_at"))
    if signal_at is not None and saved_at is not None and first_at is not None:
        source = "run.json segments"
        started = _iso(resumed.get("process_started_at"))
        loaded = _iso(resumed.get("checkpoint_loaded_at"))
    elif outside is not None:
        source = "outside (scancel, checkpoint seen, metrics.jsonl)"
        signal_at, saved_at, first_at = outside.signal_at, outside.saved_at, outside.first_step_at
        started = loaded = None
    else:
        raise RuntimeError("run.json has no stop and restart times, and nothing was seen outside")
    total = first_at - signal_at
    phases = [("stop signal -> checkpoint saved", saved_at - signal_at)]
    if started is not None and loaded is not None:
        phases += [
            ("stop signal -> requeued process started", started - signal_at),
            ("process started -> checkpoint loaded", loaded - started),
            ("checkpoint loaded -> first step", first_at - loaded),
        ]
    phases += [
        ("stop signal -> first step (all)", total),
        ("of which Slurm's queue (requeue -> start)", queue_wait),
    ]
    recovery = total - queue_wait
    return {
        "recovery_s": round(recovery, 3),
        "recovery_save_s": round(saved_at - signal_at, 3),
        "source": source,
        "phases": phases,
    }


def _wait(what: str, ready: Callable[[], Any], timeout_s: float, cluster: SlurmCluster, log: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = ready()
        if found:
            return found
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no job log)"
    raise RuntimeError(f"timed out waiting for {what}: {tail!r}")


def _train_steps(run_dir: Path) -> list[tuple[int, float]]:
    """(step, time) of metrics.jsonl's train records."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [(r["step"], r["time"]) for r in records if r.get("split") == "train"]


def _submit(cluster: SlurmCluster, work: Path) -> str:
    sets = [word for item in TINY for word in ("--set", item)]
    done = subprocess.run(
        [sys.executable, "-m", "trainforge", "slurm", str(REPO / "config/vit_digits.yaml"),
         "--nodes", "1", "--gpus-per-node", "0", "--procs-per-node", "2", "--time", "00:30:00",
         "--job-name", "recovery", *sets, "--submit"],
        cwd=work, env=cluster.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    found = re.search(r"Submitted batch job (\d+)", done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"trainforge slurm --submit failed: {done.stderr.strip()[-300:]}")
    return found.group(1)


def measure(cluster: SlurmCluster, work: Path) -> dict[str, Any]:
    """One job, one SIGUSR1, one requeue: the figures of its recovery."""
    from trainforge.engine import checkpoint as ckpt

    job_id = _submit(cluster, work)
    log, run_dir = work / f"runs/slurm/slurm-recovery-{job_id}.out", work / "runs/recovery"
    interrupted = run_dir / "checkpoints/checkpoint_interrupted"
    _wait("training", lambda: _train_steps(run_dir), 300, cluster, log)
    signal_at = time.time()
    cluster.run("scancel", "--signal=USR1", job_id)
    _wait("the checkpoint", lambda: interrupted.is_dir() and ckpt.verify(interrupted) is None,
          120, cluster, log)  # fmt: skip
    saved_at = time.time()
    stopped_at = ckpt.read_meta(interrupted)["global_step"]
    _wait("the requeue", lambda: cluster.job(job_id)["Restarts"] == "1", 120, cluster, log)

    def first_step_again() -> float | None:
        later = [t for step, t in _train_steps(run_dir) if step > stopped_at and t > saved_at]
        return min(later) if later else None

    first_at = _wait("the requeued job's first step", first_step_again, 300, cluster, log)
    job = cluster.job(job_id)
    cluster.run("scancel", job_id)  # stop the job now: what was to be measured has happened
    _wait("the job to end", lambda: cluster.job(job_id)["JobState"] == "CANCELLED", 120,
          cluster, log)  # fmt: skip
    record = json.loads((run_dir / "run.json").read_text())
    return figures(record, queue_wait_s(job), Outside(signal_at, saved_at, first_at))


def table_text(found: dict[str, Any]) -> str:
    from common import table

    rows = [[name, f"{value:.1f}"] for name, value in found["phases"]]
    rows.append(["recovery_s (without the queue)", f"{found['recovery_s']:.1f}"])
    title = (
        "Recovery on a real single-node Slurm: scancel --signal=USR1 -> checkpoint -> requeue "
        f"-> first step (times from {found['source']})"
    )
    return table(title, ["phase", "seconds"], rows)


def run() -> tuple[str, dict[str, float]]:
    reason = missing_requirements()
    if reason:
        raise RuntimeError(reason)
    with tempfile.TemporaryDirectory(prefix="trainforge-recovery-") as tmp:
        work = Path(tmp)
        (work / "slurm").mkdir()
        with single_node(work / "slurm") as cluster:
            found = measure(cluster, work)
    ratios = {"recovery_s": found["recovery_s"], "recovery_save_s": found["recovery_save_s"]}
    return table_text(found), ratios


if __name__ == "__main__":
    text, ratios = run()
    print(text)
    print(ratios)
