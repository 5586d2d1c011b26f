"""A sweep as a Slurm job array: `trainforge sweep ... --slurm --time T [--submit]`.

`#SBATCH --array=0-(K-1)%K` starts K array tasks (K = `--parallel`, default 2), each running
the same `trainforge sweep` command, which pulls trials from the shared journal in the
sweep folder until the study has its N trials; so tasks may come and go (a task that
starts late finds fewer trials left). Each task is one process on one node: the sweep runs
as the batch shell (`exec`), so `--signal=B:USR1@120` reaches it before the time limit; it
stops its trial with a checkpoint and requeues its own task (`scontrol requeue`), and the
requeued task resumes that trial. A task Slurm killed outright (node failure, preemption
without the signal) leaves its trial's lease free: the next task to claim a trial queues it
again and it resumes from its newest checkpoint.

The options checks and `sbatch` submission are `trainforge slurm`'s (`launch.slurm`); the
script differs (no srun or torchrun: one process per task trains its trial).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.launch.slurm import (
    SIGNAL_LEAD_S,
    SlurmJob,
    check_directive,
    check_name,
    parse_time,
    submit,
)


def array_job(plan: dict[str, Any], own: dict[str, Any]) -> tuple[SlurmJob, int]:
    """The checked job (for naming and submission) and its array size."""
    if "time" not in own:
        raise UserError("--slurm needs --time HH:MM:SS", "e.g. --slurm --time 04:00:00")
    parse_time(own["time"])
    for flag in ("partition", "account"):
        if own.get(flag):
            check_name(f"--{flag}", own[flag])
    name = own.get("job-name") or plan["name"]
    check_name("--job-name", name, job_name=True)
    extra = tuple(check_directive(d) for d in own.get("sbatch", []))
    cpus = _count(own, "cpus-per-task", 1)
    gpus = _count(own, "gpus-per-node", 0, allow_zero=True)
    job = SlurmJob(
        config=plan["config"], nodes=1, gpus_per_node=gpus, time=own["time"].strip(),
        procs_per_node=1, cpus_per_task=cpus, job_name=name,
        output_dir=str(Path(plan["folder"]) / "logs"), partition=own.get("partition"),
        account=own.get("account"), extra_directives=extra,
        env_bin=str(Path(sys.executable).parent),
    )  # fmt: skip
    return job, plan["parallel"] if "parallel" in own else 2


def _count(own: dict[str, Any], name: str, default: int, allow_zero: bool = False) -> int:
    if name not in own:
        return default
    text = str(own[name])
    if not text.isdigit() or (int(text) == 0 and not allow_zero):
        raise UserError(f"--{name} {text}: a whole number", f"e.g. --{name} 4")
    return int(text)


def sweep_command(plan: dict[str, Any]) -> list[str]:
    """The command every array task runs: the sweep, one trial at a time per task."""
    goals = plan.get("objectives") or [[plan["metric"], plan["direction"]]]
    if len(goals) > 1:  # an edge sweep: its objectives, export format and latency budget
        aims = [a for m, d in goals for a in ("--objective", f"{m}:{d[:3]}")]
        aims += ["--export-format", plan["export_format"],
                 "--latency-budget-ms", repr(plan["latency_budget_ms"])]  # fmt: skip
    else:
        aims = ["--metric", plan["metric"], "--direction", plan["direction"]]
    return [
        "-m", "trainforge", "sweep", plan["config"], "--space", plan["space_file"],
        "--trials", str(plan["trials"]), "--name", plan["name"], *aims,
        "--pruner", plan["pruner"], *plan["train_args"],
    ]  # fmt: skip


def render_array(plan: dict[str, Any], job: SlurmJob, tasks: int) -> str:
    lines = [
        "#!/bin/bash",
        f"# trainforge sweep {plan['name']}: {plan['trials']} trials of {plan['config']}, "
        f"{tasks} array tasks pulling trials",
        f"# from {plan['folder']}/study.journal; rendered by `trainforge sweep --slurm`.",
        f"#SBATCH --job-name={job.job_name}",
        f"#SBATCH --array=0-{tasks - 1}%{tasks}",
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={job.cpus_per_task}",
    ]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    lines.append(f"#SBATCH --time={job.time}")
    for key in ("partition", "account"):
        if getattr(job, key):
            lines.append(f"#SBATCH --{key}={getattr(job, key)}")
    lines += [
        f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD_S}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={job.output_dir}/slurm-%A_%a.out",
        *[f"#SBATCH --{d}" for d in job.extra_directives],
        "",
        "# trainforge from the Python environment this script was rendered in.",
        f'export PATH={shlex.quote(job.env_bin or "")}:"$PATH"',
        'export TRAINFORGE_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        "exec python " + " ".join(shlex.quote(a) for a in sweep_command(plan)),
    ]
    return "\n".join(lines) + "\n"


def slurm_sweep(plan: dict[str, Any], own: dict[str, Any]) -> int:
    """Print the array script, or with --submit write it beside the logs and sbatch it."""
    from trainforge.sweep.study import record_sweep

    job, tasks = array_job(plan, own)
    script = render_array(plan, job, tasks)
    if not own.get("submit"):
        sys.stdout.write(script)
        return 0
    folder = record_sweep(plan)  # the sweep's record exists before any task starts
    job_id, path = submit(job, script)
    print(f"Submitted batch job {job_id} ({tasks} array tasks)")
    print(f"script: {path}")
    print(f"logs:   {job.output_dir}/slurm-{job_id}_*.out")
    print(f"status: trainforge sweep status {folder.path}")
    return 0


def requeue_own_task() -> None:
    """After SIGUSR1 in a Slurm job: put this array task back in the queue."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if done.returncode == 0:
        print(f"requeued Slurm job {job}; its trial resumes when it starts again")
    else:
        print(f"could not requeue Slurm job {job}: {(done.stderr or done.stdout).strip()}")
