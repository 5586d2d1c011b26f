"""Slurm's commands as small shell scripts, for the browser test's login node (the CLI's
tests use the real Slurm, test_slurm_target.py, which a browser-test machine may not have).

They keep jobs as files in `$FAKE_SLURM`. `sbatch` runs the real rendered batch script in
the background with the variables Slurm sets, its output where `#SBATCH --output` says; while
the file `$FAKE_SLURM/hold` exists a job waits, pending for `Resources`. A job's processes
are those whose environment holds its `SLURM_JOB_ID` (what Slurm's cgroup is to a real job:
torchrun's workers included, wherever they sit in the process tree). `squeue` lists a job as
PENDING or RUNNING while it has processes, `sacct` says how it ended, `scancel` sends SIGTERM
to every one of them as Slurm does, `srun` runs its command here, `scontrol show hostnames`
names this machine, `sinfo` one partition.
"""

from __future__ import annotations

from pathlib import Path

SBATCH = r"""#!/bin/bash
set -eu
script="${@: -1}"
dir="$FAKE_SLURM"
mkdir -p "$dir"
id=$(( $(cat "$dir/last" 2>/dev/null || echo 100) + 1 ))
echo "$id" > "$dir/last"
field() { sed -n "s/^#SBATCH --$1=//p" "$script" | head -n 1; }
name=$(field job-name); out=$(field output); cpus=$(field cpus-per-task)
out=${out//%x/$name}; out=${out//%j/$id}
mkdir -p "$(dirname "$out")"
cp "$script" "$dir/$id.sh"
touch "$dir/$id.queued"
export SLURM_JOB_ID=$id SLURM_JOB_NAME=$name SLURM_NNODES=1 SLURM_JOB_NUM_NODES=1 \
    SLURM_JOB_NODELIST=localhost SLURM_CPUS_PER_TASK=${cpus:-1} SLURM_SUBMIT_DIR=$PWD
setsid bash -c '
    echo $$ > "$0/$1.pgid"
    while [ -e "$0/hold" ] && [ ! -e "$0/$1.cancelled" ]; do sleep 0.2; done
    rm -f "$0/$1.queued"
    [ -e "$0/$1.cancelled" ] && exit 0
    rc=0; bash "$0/$1.sh" || rc=$?
    echo "$rc" > "$0/$1.rc"' "$dir" "$id" >> "$out" 2>&1 < /dev/null &
# Listed only once its process group exists, as Slurm lists a job once it has it.
until [ -s "$dir/$id.pgid" ]; do sleep 0.05; done
echo "$id"
"""

SQUEUE = r"""#!/bin/bash
job_pids() {  # the processes of job $1: started with its SLURM_JOB_ID, from this $FAKE_SLURM
    grep -lz "^SLURM_JOB_ID=$1\$" /proc/[0-9]*/environ 2>/dev/null |
        xargs -r grep -lz "^FAKE_SLURM=$FAKE_SLURM\$" 2>/dev/null | cut -d/ -f3
}
fmt="%i %T %r"; ids=""
while [ $# -gt 0 ]; do
    case "$1" in -o) fmt=$2; shift;; -j) ids=$2; shift;; esac; shift
done
for id in ${ids//,/ }; do
    [ -s "$FAKE_SLURM/$id.pgid" ] || continue
    [ -n "$(job_pids "$id")" ] || continue
    if [ -e "$FAKE_SLURM/$id.queued" ]; then state=PENDING; reason=Resources
    else state=RUNNING; reason=None; fi
    line=${fmt//%i/$id}; line=${line//%T/$state}; echo "${line//%r/$reason}"
done
"""

SACCT = r"""#!/bin/bash
job_pids() {  # the processes of job $1: started with its SLURM_JOB_ID, from this $FAKE_SLURM
    grep -lz "^SLURM_JOB_ID=$1\$" /proc/[0-9]*/environ 2>/dev/null |
        xargs -r grep -lz "^FAKE_SLURM=$FAKE_SLURM\$" 2>/dev/null | cut -d/ -f3
}
ids=""
while [ $# -gt 0 ]; do case "$1" in -j) ids=$2; shift;; esac; shift; done
for id in ${ids//,/ }; do
    [ -s "$FAKE_SLURM/$id.pgid" ] || continue
    [ -n "$(job_pids "$id")" ] && continue
    if [ -e "$FAKE_SLURM/$id.cancelled" ]; then echo "$id|CANCELLED by 0|0:15|0"
    elif [ "$(cat "$FAKE_SLURM/$id.rc" 2>/dev/null)" = 0 ]; then echo "$id|COMPLETED|0:0|0"
    else echo "$id|FAILED|$(cat "$FAKE_SLURM/$id.rc" 2>/dev/null || echo 1):0|0"; fi
done
"""

SCANCEL = r"""#!/bin/bash
job_pids() {  # the processes of job $1: started with its SLURM_JOB_ID, from this $FAKE_SLURM
    grep -lz "^SLURM_JOB_ID=$1\$" /proc/[0-9]*/environ 2>/dev/null |
        xargs -r grep -lz "^FAKE_SLURM=$FAKE_SLURM\$" 2>/dev/null | cut -d/ -f3
}
touch "$FAKE_SLURM/$1.cancelled"
pids=$(job_pids "$1")
[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
exit 0
"""

SCONTROL = r"""#!/bin/bash
[ "$1 $2" = "show hostnames" ] && echo localhost
exit 0
"""

SRUN = r"""#!/bin/bash
while [ "${1#--}" != "$1" ]; do shift; done  # srun's own options
exec "$@"
"""

SINFO = r"""#!/bin/bash
echo 'debug*|up|1|infinite'
"""

COMMANDS = {
    "sbatch": SBATCH, "squeue": SQUEUE, "sacct": SACCT, "scancel": SCANCEL,
    "scontrol": SCONTROL, "srun": SRUN, "sinfo": SINFO,
}  # fmt: skip


def job_processes(jobs: Path) -> list[int]:
    """The processes of every job this stand-in started (to end them after a test)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            names = environ.read_bytes().split(b"\0")
        except OSError:
            continue
        if f"FAKE_SLURM={jobs}".encode() in names and any(
            n.startswith(b"SLURM_JOB_ID=") for n in names
        ):
            found.append(int(environ.parent.name))
    return found


def install(folder: Path) -> tuple[Path, Path]:
    """(the folder of the commands, to put first on PATH; the jobs folder, `$FAKE_SLURM`)."""
    bin_dir, jobs = folder / "bin", folder / "jobs"
    bin_dir.mkdir(parents=True)
    jobs.mkdir()
    for name, text in COMMANDS.items():
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    return bin_dir, jobs
