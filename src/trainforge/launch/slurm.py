"""Slurm batch scripts for trainforge: `#SBATCH` directives, then srun + torchrun rendezvous.

One script shape serves both `trainforge slurm` (rendered for one config, validated first)
and the ready-made `scripts/train_hpc.sh` (`generic_script()`, kept identical by a test).

Signals, the part that is easy to get wrong: Slurm delivers a signal for a job step
(SIGUSR1 from `--signal=USR1@120` before the time limit or `scancel --signal=USR1 JOB`;
SIGTERM from `scancel`, the time limit, preemption or a requeue) to every process of the
step, so torchrun's workers receive it directly. torchrun would die of SIGUSR1 (its default
action) and forwards SIGTERM, so a worker would see a second copy, and a training process
treats a second signal as "abort now" (possibly mid-checkpoint). So torchrun is started with
SIGUSR1 and SIGTERM ignored (`trap '' USR1 TERM` before `exec`, and SIGTERM left out of
torchrun's own handled signals through PET_SIGNALS_TO_HANDLE, its `--signals-to-handle`
option since torch 2.9): each training process gets each signal once, from Slurm. The
ignored dispositions are inherited by the workers until the training loop installs its
handlers (and again after it ends), so a signal during start-up, or torchrun stopping the
other workers when the first one exits, cannot cut short rank 0 writing the checkpoint and
running `scontrol requeue`. The requeued job runs the same script and the run continues
from its newest checkpoint by itself. A SIGUSR1 sent to the batch shell instead
(`--signal=B:USR1@...`, `scancel --batch`) is passed on to the step by a trap.
Elastic jobs (`--nodes MIN-MAX`): Slurm starts the job on any node count in the range, and
torchrun's `--nnodes MIN:N` (N = the nodes Slurm gave, $SLURM_JOB_NUM_NODES) with
`--max-restarts` restarts the worker group on the nodes left when one is lost; `--no-kill`
(sbatch and srun) keeps Slurm from ending the whole job when a node fails. A fixed-size job
keeps Slurm's default: a lost node ends the job, and `--requeue` runs it again (NODE_FAIL).
`--kill-on-bad-exit=0`: after SIGUSR1 the training processes exit with 138, and other nodes
must not be killed while rank 0 still saves and requeues. torchrun itself is started as
`python3 -m trainforge.launch.torchrun` (launch/torchrun.py: torch's elastic agent, the same
arguments), so that a planned stop leaves trainforge's lines in the job log, not torchrun's
crash report and traceback.

Written by hand: submitit renders and submits Slurm jobs too, but it pickles a Python
function per task and runs its own process management instead of torchrun, and its
requeue-on-signal checkpoints through the pickled callable; the script here is plain text a
user can read, edit and submit with `sbatch`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from trainforge.errors import UserError
from trainforge.parallel import PORT_BASE, PORT_SPAN

SIGNAL_LEAD_S = 120  # SIGUSR1 this long before the time limit: enough to save and requeue
# Worker-group restarts torchrun makes in an elastic job (a lost node, a node that joins).
ELASTIC_MAX_RESTARTS = 3
GENERIC_GPUS_PER_NODE = 4  # the training-pipeline assets README: 4x A100 per node

# torchrun under srun: SIGUSR1 and SIGTERM ignored (Slurm signals the training processes
# itself), and SIGTERM not among the signals torchrun handles and forwards.
TORCHRUN_SIGNALS_TO_HANDLE = "SIGINT,SIGHUP,SIGQUIT"
TORCHRUN_WRAPPER = ("bash", "-c", 'trap "" USR1 TERM; exec "$@"', "torchrun")
# torchrun with trainforge's handling of how the processes end (launch/torchrun.py).
TORCHRUN = ("python3", "-m", "trainforge.launch.torchrun")  # python3: venvs, conda, Debian

_NODES_RE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)$")
_JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._,-]*$")
_DIRECTIVE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(=\S+)?$")
_PLAIN_PATH_RE = re.compile(r"^[A-Za-z0-9_./+-]+$")


@dataclass(frozen=True)
class SlurmJob:
    """Everything one batch script says. Paths stay as typed: relative to the submit dir."""

    config: str
    nodes: int  # the fewest nodes the job runs on (all of them unless max_nodes is set)
    gpus_per_node: int
    time: str
    procs_per_node: int  # training processes per node: one per GPU, or CPU processes
    cpus_per_task: int  # one srun task per node runs torchrun and all its processes
    job_name: str
    output_dir: str
    partition: str | None = None
    account: str | None = None
    extra_directives: tuple[str, ...] = ()
    train_args: tuple[str, ...] = ()  # after CONFIG, e.g. ("--set", "a.b=1")
    env_bin: str | None = None  # folder holding torchrun and the trainforge Python
    profile_note: str | None = None
    max_nodes: int | None = None  # elastic: Slurm may start it on nodes..max_nodes

    @property
    def elastic(self) -> bool:
        return self.max_nodes is not None and self.max_nodes > self.nodes

    @property
    def nodes_text(self) -> str:
        """What sbatch's --nodes says: `2`, or `2-4` for an elastic job."""
        return f"{self.nodes}-{self.max_nodes}" if self.elastic else str(self.nodes)

    @property
    def log_pattern(self) -> str:
        folder = self.output_dir.rstrip("/")
        return "slurm-%x-%j.out" if folder in ("", ".") else f"{folder}/slurm-%x-%j.out"

    def log_path(self, job_id: str) -> str:
        return self.log_pattern.replace("%x", self.job_name).replace("%j", job_id)


def parse_nodes(value: str) -> tuple[int, int | None]:
    """`--nodes 2` -> (2, None); `--nodes 2-4` (elastic) -> (2, 4); UserError otherwise."""
    match = _NODES_RE.match(value.strip())
    low = int(match.group(1)) if match else 0
    high = int(match.group(2)) if match and match.group(2) else None
    if not match or low < 1 or (high is not None and high < low):
        raise UserError(
            f"--nodes {value!r} is not a node count or a range MIN-MAX of at least 1 node",
            "write --nodes 2, or --nodes 2-4 for a job that runs on 2 to 4 nodes",
        )
    return low, None if high == low else high


def parse_time(value: str) -> int:
    """Seconds in a Slurm time limit written HH:MM:SS or D-HH:MM:SS; UserError otherwise."""
    match = _TIME_RE.match(value.strip())
    if not match:
        raise UserError(
            f"--time {value!r} is not HH:MM:SS or D-HH:MM:SS",
            "write the wall-clock limit like --time 12:00:00 or --time 2-00:00:00",
        )
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= SIGNAL_LEAD_S:
        raise UserError(
            f"--time {value}: the job gets SIGUSR1 {SIGNAL_LEAD_S} s before its limit to save "
            "a checkpoint, so it must run longer than that",
            "give at least --time 00:05:00",
        )
    return total


def check_name(flag: str, value: str, *, job_name: bool = False) -> str:
    pattern = _JOB_NAME_RE if job_name else _SLURM_NAME_RE
    if not pattern.match(value):
        allowed = "letters, digits and . _ -" + ("" if job_name else " ,")
        raise UserError(
            f"{flag} {value!r} has characters Slurm does not take here", f"use only {allowed}"
        )
    return value


def check_directive(value: str) -> str:
    """An extra `#SBATCH` option such as `qos=high` or `--mem=64G`, without the dashes."""
    bare = value.strip().lstrip("-")
    if not _DIRECTIVE_RE.match(bare):
        raise UserError(
            f"--sbatch {value!r} is not one sbatch option",
            "write it like --sbatch qos=high or --sbatch mem=64G (no spaces)",
        )
    return bare


def job_name_for(config_name: str | None, config_path: str) -> str:
    """A Slurm-safe job name from the config's `name`, else its file name."""
    raw = config_name or Path(config_path).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-._")
    return name or "trainforge"


def directives(job: SlurmJob) -> list[str]:
    lines = [
        f"--job-name={job.job_name}",
        f"--nodes={job.nodes_text}",
        "--ntasks-per-node=1",
    ]
    if job.elastic:
        lines.append("--no-kill")  # a lost node leaves the job to torchrun's restart
    if job.gpus_per_node:
        lines.append(f"--gpus-per-node={job.gpus_per_node}")
    lines.append(f"--cpus-per-task={job.cpus_per_task}")
    lines.append(f"--time={job.time}")
    if job.partition:
        lines.append(f"--partition={job.partition}")
    if job.account:
        lines.append(f"--account={job.account}")
    lines += [
        f"--signal=USR1@{SIGNAL_LEAD_S}",
        "--requeue",
        "--open-mode=append",
        f"--output={job.log_pattern}",
    ]
    lines += [f"--{d}" for d in job.extra_directives]
    return [f"#SBATCH {line}" for line in lines]


def render_script(job: SlurmJob) -> str:
    """The sbatch script for `job` (text ending in a newline)."""
    train = " ".join(shlex.quote(a) for a in ("-m", "trainforge", "train", job.config))
    args = job.train_args
    pairs = [args[i : i + 2] for i in range(0, len(args), 2)]  # "--set a=b", "--profile p"
    train += "".join(" \\\n        " + " ".join(shlex.quote(a) for a in p) for p in pairs)
    header = [
        "#!/bin/bash",
        f"# trainforge: {job.config} on {_nodes(job)}, rendered by `trainforge slurm`.",
        # `trainforge slurm` creates the log folder with or without --submit (Slurm opens
        # the log before the script runs), so the script asks the user for nothing.
        f"# Logs: {job.log_pattern} (trainforge slurm created {shlex.quote(job.output_dir)}:"
        " Slurm opens the log there before the script runs).",
    ]
    if job.profile_note:
        header.append(f"# profile: {job.profile_note}")
    env = []
    if job.env_bin:
        env = [
            "# torchrun and trainforge from the Python environment this script was rendered in.",
            f'export PATH="{job.env_bin}:$PATH"'
            if _PLAIN_PATH_RE.match(job.env_bin)
            else f'export PATH={shlex.quote(job.env_bin)}:"$PATH"',
        ]
    if not job.gpus_per_node:
        share = f"SLURM_CPUS_PER_TASK / {job.procs_per_node}"
        env += [
            "# CPU job: each training process gets its share of the task's CPUs as threads",
            "# (torchrun would give it one).",
            f"export OMP_NUM_THREADS=$(( {share} > 0 ? {share} : 1 ))",
        ]
    nnodes = f'"{job.nodes}:$SLURM_JOB_NUM_NODES"' if job.elastic else '"$SLURM_NNODES"'
    body = _launch_block(str(job.procs_per_node), train, env, nnodes, job.elastic)
    return "\n".join([*header, *directives(job), "", *body]) + "\n"


def generic_script() -> str:
    """`scripts/train_hpc.sh`: any config, 4 GPUs per node by default (as the assets README)."""
    job = SlurmJob(
        config="CONFIG",
        nodes=1,
        gpus_per_node=GENERIC_GPUS_PER_NODE,
        time="24:00:00",
        procs_per_node=GENERIC_GPUS_PER_NODE,
        cpus_per_task=8 * GENERIC_GPUS_PER_NODE,
        job_name="trainforge",
        output_dir=".",
    )
    header = [
        "#!/bin/bash",
        "# Train with trainforge on a Slurm cluster: one node, 4 GPUs, DDP through torchrun.",
        "#",
        "#   sbatch scripts/train_hpc.sh CONFIG [trainforge train options]",
        "#   sbatch --nodes=2 --gpus-per-node=8 --time=48:00:00 scripts/train_hpc.sh CONFIG",
        "#",
        "# Submit from the project folder with trainforge's Python environment active (sbatch",
        "# passes your environment to the job). Options given to sbatch override the lines",
        "# below. `trainforge slurm CONFIG ...` renders the same script for one config.",
        "# Generated by `python -m trainforge.launch.slurm`; edit that, not this file.",
    ]
    env = [
        'CONFIG="${1:?usage: sbatch scripts/train_hpc.sh CONFIG [trainforge train options]}"',
        "shift",
        "# One training process per GPU of this node (what the job got, else the 4 asked for).",
        f'NPROC="${{SLURM_GPUS_ON_NODE:-{GENERIC_GPUS_PER_NODE}}}"',
    ]
    train = '-m trainforge train "$CONFIG" "$@"'
    body = _launch_block('"$NPROC"', train, env, '"$SLURM_NNODES"', elastic=False)
    return "\n".join([*header, *directives(job), "", *body]) + "\n"


def _launch_block(nproc: str, train: str, env: list[str], nnodes: str, elastic: bool) -> list[str]:
    """The script after the directives; `nproc`, `train` and `nnodes` are shell words, quoted.
    An elastic job lets torchrun restart on the nodes left (`--nnodes MIN:N`, restarts) and
    keeps srun from ending the step when a node fails."""
    no_kill = " --no-kill" if elastic else ""
    restarts = f" --max-restarts {ELASTIC_MAX_RESTARTS}" if elastic else ""
    return [
        "set -eu  # no pipefail: head -n1 below closes the pipe on scontrol on purpose",
        ': "${SLURM_JOB_ID:?submit this script with sbatch}"',
        *env,
        "export PYTHONUNBUFFERED=1",
        "",
        "# Rendezvous on the job's first node, on a port derived from the job id (a requeued",
        "# job keeps its id).",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        ': "${MASTER_ADDR:?scontrol show hostnames named no node}"',
        f"MASTER_PORT=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))",
        "export MASTER_ADDR MASTER_PORT",
        'echo "trainforge: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on'
        ' $SLURM_JOB_NODELIST, rendezvous $MASTER_ADDR:$MASTER_PORT"',
        "",
        "# Slurm sends SIGUSR1 (--signal above, `scancel --signal=USR1 JOB`) and SIGTERM",
        "# (scancel, time limit, preemption) to every process of the srun step. torchrun runs",
        "# with both ignored so that no training process gets a second copy: on SIGUSR1 they",
        "# save checkpoint_interrupted and requeue the job, which resumes from it by itself;",
        "# on SIGTERM they save it and stop. torchrun runs as trainforge.launch.torchrun (same",
        "# options), which reports such a planned stop in one line instead of a crash report.",
        f"export PET_SIGNALS_TO_HANDLE={TORCHRUN_SIGNALS_TO_HANDLE}  # torchrun: not SIGTERM",
        'srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=0'
        f"{no_kill} \\",
        f"    {shlex.join(TORCHRUN_WRAPPER)} \\",
        f"    {shlex.join(TORCHRUN)} --nnodes {nnodes}{restarts} --nproc-per-node {nproc} \\",
        '    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT"'
        ' --rdzv-id "$SLURM_JOB_ID" \\',
        f"    {train} &",
        "step=$!",
        "# A SIGUSR1 sent to this batch shell instead (--signal=B:USR1@..., scancel --batch)",
        "# goes on to the training step: srun forwards it to its tasks.",
        "trap 'kill -USR1 \"$step\" 2>/dev/null || true' USR1",
        "status=0",
        'wait "$step" || status=$?',
        "# wait returns early (128 + signal) when a trapped signal arrives: keep waiting.",
        'while [ "$status" -gt 128 ] && kill -0 "$step" 2>/dev/null; do',
        "    status=0",
        '    wait "$step" || status=$?',
        "done",
        'exit "$status"',
    ]


def _nodes(job: SlurmJob) -> str:
    per_node = (
        f"{job.gpus_per_node} GPU{'s' if job.gpus_per_node != 1 else ''}"
        if job.gpus_per_node
        else f"{job.procs_per_node} CPU process{'es' if job.procs_per_node != 1 else ''}"
    )
    plural = "s" if job.elastic or job.nodes != 1 else ""
    return f"{job.nodes_text} node{plural} x {per_node}"


def submit(job: SlurmJob, script: str) -> tuple[str, Path]:
    """Write the script to the log folder and `sbatch` it; returns (job id, script path)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UserError(
            "--submit: sbatch not found on PATH",
            "run this on a Slurm login node, or drop --submit and sbatch the printed script",
        )
    folder = Path(job.output_dir)
    folder.mkdir(parents=True, exist_ok=True)  # Slurm opens the log there before the script
    path = folder / f"{job.job_name}.sbatch"
    path.write_text(script, encoding="utf-8")
    try:
        done = subprocess.run(
            [sbatch, "--parsable", str(path)], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"sbatch {path} failed: {err}", "check that Slurm answers: sinfo") from err
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"exit code {done.returncode}"
        raise UserError(f"sbatch {path} failed: {reason}", "fix the option Slurm names")
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise UserError(f"sbatch {path} printed no job id: {done.stdout.strip()!r}", "see squeue")
    return job_id, path


if __name__ == "__main__":
    sys.stdout.write(generic_script())
