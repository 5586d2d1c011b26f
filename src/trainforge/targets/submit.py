"""Submitting a run to a Slurm target: validate here, copy what the cluster lacks, sbatch the
same script `trainforge slurm` prints, and record the job.

Order matters for "nothing submitted on a fault": the config is validated and the target
checked (login, Slurm, the remote trainforge, the partition) before anything is copied, and
the copy finishes before sbatch runs. sbatch exports the submitting shell's environment to
the job, and that shell ran the target's `setup` line; the script also puts the folder of
the cluster's trainforge (found after that line) first on PATH, as it does this machine's
for a local submit.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.targets.check import probe_target
from trainforge.targets.jobs import JobRecord, ensure_free, save_job
from trainforge.targets.remote import Remote
from trainforge.targets.spec import Target

SCRIPTS = "runs/slurm"  # where scripts and logs go, as `trainforge slurm --submit` puts them
# Config fields that name local inputs: copied when they exist here (outputs are not).
PATH_SUFFIXES = ("_file", "_dir", "_path", "_name_or_path")
OUTPUT_SECTIONS = ("output", "logging", "checkpoint")


def local_inputs(config: Path, data: dict[str, Any]) -> list[str]:
    """The config file and every relative path it names that exists here, inside this
    folder (a data file, an image folder, a base model, an extension)."""
    found = [str(config)]

    def visit(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k not in OUTPUT_SECTIONS:
                    visit(v, k)
        elif isinstance(node, list | tuple):
            for item in node:
                visit(item, key)
        elif isinstance(node, str) and (key.endswith(PATH_SUFFIXES) or key == "extensions"):
            path = Path(node.split(":", 1)[0])  # an extension may be FILE:NAME
            inside = not path.is_absolute() and not str(path).startswith("..")
            if inside and path.exists() and str(path) not in found:
                found.append(str(path))

    visit(data, "")
    return found


def copy_inputs(remote: Remote, files: list[str]) -> None:
    """rsync the files (with their relative paths) into the target's project folder."""
    done = remote.rsync(["--relative", *files, remote.rsync_destination() + "/"])
    if done.code != 0:
        said = [x for x in done.err.strip().splitlines() if x.strip()]
        reason = next((x for x in said if "No space left" in x), said[0] if said else "")
        fix = "check the project folder there and try again"
        if "No space left" in done.err or "Disk quota" in done.err:
            fix = "free space in the project folder on the cluster (df -h there), then submit again"
        raise UserError(
            f"target {remote.target.name}: copying {', '.join(files)} to "
            f"{remote.target.where()} failed ({reason or 'rsync exit ' + str(done.code)}); "
            "nothing was submitted",
            fix,
        )


def sbatch_remote(remote: Remote, script: str, script_path: str) -> str:
    """Write the script on the cluster and sbatch it there; the job id."""
    # sbatch hands the job this shell's environment. Without SSH_CLIENT: bash takes a shell
    # that has it for one started by sshd and reads ~/.bashrc even for `bash -c`, so a
    # pyenv or conda init there would put its own python3 before the job's environment.
    sbatch = "env -u SSH_CLIENT -u SSH2_CLIENT -u SSH_CONNECTION -u SSH_TTY sbatch --parsable"
    line = f"mkdir -p {SCRIPTS} && cat > {script_path} && {sbatch} {script_path}"
    done = remote.run(line, stdin=script, timeout=180)
    out = done.out.strip().splitlines()
    job_id = out[-1].split(";")[0] if out else ""
    if done.code != 0 or not job_id.isdigit():
        said = [x for x in (done.err or done.out).strip().splitlines() if x.strip()]
        raise UserError(
            f"target {remote.target.name}: sbatch refused the job "
            f"({said[-1] if said else 'exit ' + str(done.code)})",
            "fix the option Slurm names (trainforge targets check NAME lists the partitions)",
        )
    return job_id


def submit_sweep(
    target: Target, plan: dict[str, Any], own: dict[str, Any]
) -> tuple[JobRecord, int]:
    """A checked sweep (`sweep.cli.prepare`) as a Slurm job array on the target: the array
    script `trainforge sweep --slurm` renders, with the sweep's record, config, space and
    inputs copied to the project folder there. (the job, its array size)."""
    from trainforge.config.loading import read_config_file
    from trainforge.sweep.slurm import array_job, render_array
    from trainforge.sweep.study import record_sweep

    if target.kind != "slurm":
        raise UserError(f"target {target.name} is this machine", "drop --target")
    for what, path in (("the config", plan["config"]), ("--space", plan["space_file"])):
        if Path(path).is_absolute() or path.startswith(".."):
            raise UserError(
                f"{what} {path} is outside this project folder: it is copied to the same "
                "place in the target's",
                "name it by a path inside this folder",
            )
    job, tasks = array_job(plan, own)
    extra = (*job.extra_directives, f"qos={target.qos}") if target.qos else job.extra_directives
    job = dataclasses.replace(
        job, partition=job.partition or target.partition, account=job.account or target.account,
        extra_directives=extra,
    )  # fmt: skip
    ensure_free(plan["name"])
    _, found = probe_target(target)
    job = dataclasses.replace(job, env_bin=found.get("bin") or None)
    folder = record_sweep(plan)  # sweep.json before any task starts, copied with the inputs
    Path(job.output_dir).mkdir(parents=True, exist_ok=True)  # Slurm opens the logs there
    data = read_config_file(Path(plan["config"]))
    files = [*local_inputs(Path(plan["config"]), data), plan["space_file"], str(folder.path)]
    remote = Remote(target)
    if target.remote or target.remote_dir:
        copy_inputs(remote, files)
    script_path = f"{job.output_dir}/{job.job_name}.sbatch"
    job_id = sbatch_remote(remote, render_array(plan, job, tasks), script_path)
    record = JobRecord(
        name=plan["name"], target=target.name, job_id=job_id, config=plan["config"],
        run_dir=str(folder.path), log=f"{job.output_dir}/slurm-{job_id}_0.out",
        submitted_at=datetime.now(UTC).isoformat(timespec="seconds"), options={"sweep": True},
    )  # fmt: skip
    save_job(record)
    return record, tasks


def submit_run(target: Target, config: Path, **options: Any) -> JobRecord:
    """Validate, check, copy, submit, record. `options` are `launch.cli.build_job`'s (nodes,
    gpus_per_node, time, ...) without partition/account, which the target supplies unless
    given; `resume=True` submits the run's continuation."""
    from trainforge.config import validate
    from trainforge.launch.cli import build_job, read_train_flags, target_platform
    from trainforge.launch.slurm import render_script
    from trainforge.run.resume import run_folder_for

    if target.kind != "slurm":
        raise UserError(f"target {target.name} is this machine", "use trainforge train CONFIG")
    resume = options.pop("resume", False)
    given = dict(options)  # as the user gave them: what `jobs resume` submits again
    # The command's partition and account, else the target's.
    options["partition"] = options.get("partition") or target.partition
    options["account"] = options.get("account") or target.account
    if target.qos:
        options["sbatch_options"] = [*options.get("sbatch_options", []), f"qos={target.qos}"]
    job = build_job(config, output_dir=SCRIPTS, **options)  # every option and the config
    nproc = job.procs_per_node
    flags = read_train_flags(list(job.train_args))  # the job's train line, as it will run
    resolved = validate(
        config,
        platform=target_platform(job.nodes, job.gpus_per_node),
        profile=flags.profile,
        overrides=flags.overrides,
        flags=flags.flags,
        flag_sources=flags.sources,
        world_size=job.nodes * nproc,
    )
    args = (*job.train_args, "--resume", "auto") if resume else job.train_args

    folder = run_folder_for(resolved).path
    if not resume:
        ensure_free(folder.name)
    _, found = probe_target(target)  # login, Slurm, remote trainforge, partition: or a line
    # The cluster's Python environment (after the target's setup line), not this machine's.
    job = dataclasses.replace(job, env_bin=found.get("bin") or None, train_args=args)
    remote = Remote(target)
    files = local_inputs(config, resolved.config.model_dump(mode="json"))
    if target.remote or target.remote_dir:
        remote.run(f"mkdir -p {SCRIPTS}", timeout=120)
        copy_inputs(remote, files)
    script_path = f"{SCRIPTS}/{job.job_name}.sbatch"
    job_id = sbatch_remote(remote, render_script(job), script_path)
    record = JobRecord(
        name=folder.name,
        target=target.name,
        job_id=job_id,
        config=str(config),
        run_dir=str(folder),
        log=job.log_path(job_id),
        submitted_at=datetime.now(UTC).isoformat(timespec="seconds"),
        options=given,
    )
    save_job(record)
    return record
