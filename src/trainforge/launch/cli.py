"""`trainforge slurm`: validate a run config for the nodes asked for, render the sbatch script,
print it or submit it.

The top-level command forwards its arguments here (`slurm_main`), so importing the
`trainforge` command stays light. Usage errors are one line, exit 2.

Every `trainforge train` flag works here as on `train` (`--num_threads 1`, `--max_steps`,
`--profile`, `--set`): the command's own options (`SLURM_VALUE_OPTS`, `--submit`) are taken
out first and the rest is read by `train`'s own flag parser (`config.flags`), judged with the
config and passed on to the batch script's `trainforge train` line unchanged. One option set,
as `trainforge sweep` does it, instead of a second hand-kept list of typer options.
"""

from __future__ import annotations

import contextvars
import platform as _stdlib_platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from trainforge.errors import UserError
from trainforge.launch.slurm import (
    SlurmJob,
    check_directive,
    check_name,
    job_name_for,
    parse_nodes,
    parse_time,
    render_script,
    submit,
)
from trainforge.subapp import run_subapp

slurm_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

# The command's own options that take a value; `--submit` is its one flag. Everything else on
# the line is a train flag (or the config).
SLURM_VALUE_OPTS = (
    "nodes", "gpus-per-node", "time", "partition", "account", "job-name", "output-dir",
    "procs-per-node", "cpus-per-task", "sbatch",
)  # fmt: skip
SLURM_FLAGS = ("submit",)
# What `slurm_main` read from the train flags, for `slurm_command` (typer sees only its own).
_TRAIN_WORDS: contextvars.ContextVar[list[str]] = contextvars.ContextVar("train_words")
# Submits the options elsewhere (a target over SSH) instead of `sbatch` here; the top-level
# command sets it, so this package needs nothing of `targets`.
_SEND: contextvars.ContextVar[Callable[[Path, dict], None] | None] = contextvars.ContextVar(
    "send", default=None
)


# The command's options, one alias each (typer reads the Annotated metadata).
ConfigArg = Annotated[Path, typer.Argument(help="Run config file (.yaml or .json).")]
NodesOpt = Annotated[
    str,
    typer.Option(
        "--nodes", help="Nodes to run on: 2, or a range 2-4 for an elastic job (torchrun restarts)."
    ),
]
GpusOpt = Annotated[
    int, typer.Option("--gpus-per-node", min=0, help="GPUs per node, one process each; 0: CPU.")
]
TimeOpt = Annotated[str, typer.Option("--time", help="Wall-clock limit, HH:MM:SS or D-HH:MM:SS.")]
PartitionOpt = Annotated[str | None, typer.Option("--partition", help="Slurm partition.")]
AccountOpt = Annotated[str | None, typer.Option("--account", help="Slurm account.")]
JobNameOpt = Annotated[
    str | None, typer.Option("--job-name", help="Job name (default: the config's name).")
]
OutputDirOpt = Annotated[
    str, typer.Option("--output-dir", help="Folder for the Slurm log and the script.")
]
ProcsOpt = Annotated[
    int | None,
    typer.Option(
        "--procs-per-node", min=1, help="CPU jobs (--gpus-per-node 0): processes per node."
    ),
]
CpusOpt = Annotated[
    int | None,
    typer.Option(
        "--cpus-per-task",
        min=1,
        help="CPUs per node for torchrun's processes (default: processes x (1 + loader workers)).",
    ),
]
SbatchOpt = Annotated[
    list[str] | None,
    typer.Option("--sbatch", help="Extra #SBATCH option, e.g. --sbatch qos=high (repeatable)."),
]
SubmitOpt = Annotated[
    bool, typer.Option("--submit", help="Write the script to --output-dir and sbatch it.")
]


@slurm_app.command()
def slurm_command(
    config: ConfigArg,
    nodes: NodesOpt,
    gpus_per_node: GpusOpt,
    time: TimeOpt,
    partition: PartitionOpt = None,
    account: AccountOpt = None,
    job_name: JobNameOpt = None,
    output_dir: OutputDirOpt = "runs/slurm",
    procs_per_node: ProcsOpt = None,
    cpus_per_task: CpusOpt = None,
    sbatch_options: SbatchOpt = None,
    do_submit: SubmitOpt = False,
) -> None:
    """Render an sbatch script (srun + torchrun, checkpoint and requeue on SIGUSR1); print it
    or submit it. Every train flag (--profile, --set, --max_steps ...) is taken as well."""
    min_nodes, max_nodes = parse_nodes(nodes)
    options = {
        "nodes": min_nodes, "max_nodes": max_nodes, "gpus_per_node": gpus_per_node,
        "time": time, "partition": partition, "account": account, "job_name": job_name,
        "procs_per_node": procs_per_node, "cpus_per_task": cpus_per_task,
        "sbatch_options": sbatch_options or [], "train_flags": _TRAIN_WORDS.get([]),
    }  # fmt: skip
    send = _SEND.get()
    if send is not None:
        if not do_submit:
            raise UserError(
                "--target sends the job to a cluster: add --submit",
                "or drop --target to print the script",
            )
        send(config, {k: v for k, v in options.items() if v is not None})
        return
    job = build_job(config, output_dir=output_dir, **options)
    script = render_script(job)
    if not do_submit:
        # Slurm opens the log before the script runs: a missing folder fails the job unseen.
        make_log_folder(job.output_dir)
        sys.stdout.write(script)
        return
    job_id, path = submit(job, script)
    print(f"Submitted batch job {job_id}")
    print(f"script: {path}")
    print(f"log:    {job.log_path(job_id)}")
    print(f"watch:  squeue -j {job_id}; tail -f {job.log_path(job_id)}")


def make_log_folder(output_dir: str) -> None:
    """Create the folder the job's log goes to (as `--submit` does), or one line why not."""
    try:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"--output-dir {output_dir}: cannot create the log folder ({err.strerror})",
            "pick a folder you can write with --output-dir, or create it first",
        ) from None


def build_job(
    config: Path,
    *,
    nodes: int,
    gpus_per_node: int,
    time: str,
    partition: str | None = None,
    account: str | None = None,
    job_name: str | None = None,
    output_dir: str = "runs/slurm",
    procs_per_node: int | None = None,
    cpus_per_task: int | None = None,
    profile: str | None = None,
    overrides: list[str] | None = None,
    sbatch_options: list[str] | None = None,
    max_nodes: int | None = None,
    train_flags: list[str] | None = None,
) -> SlurmJob:
    """Check every option and the config (for the nodes the job will run on); UserError else.
    `max_nodes` makes the job elastic: it may run on `nodes` to `max_nodes` nodes.
    `train_flags` are `trainforge train` flags (without the config), judged with it and
    passed to the job's train line as given."""
    extra = _check_options(
        time, partition, account, job_name, output_dir, sbatch_options, gpus_per_node,
        procs_per_node,
    )  # fmt: skip
    nproc = gpus_per_node or procs_per_node or 1
    flags = read_train_flags(list(train_flags or []))
    profile = profile or flags.profile
    sets, train_args = _train_line(flags, profile, gpus_per_node, overrides, train_flags)
    # Judged, and planned, for the nodes and processes it asks for: both ends of a range.
    for count in sorted({nodes, max_nodes or nodes}, reverse=True):
        resolved = _judge(config, flags, sets, profile, count, gpus_per_node, nproc)
    workers = resolved.config.data.dataloader_num_workers
    return SlurmJob(
        config=str(config),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        time=time.strip(),
        procs_per_node=nproc,
        cpus_per_task=cpus_per_task or nproc * (1 + workers),
        job_name=job_name or job_name_for(resolved.config.name, str(config)),
        output_dir=output_dir,
        partition=partition,
        account=account,
        extra_directives=extra,
        train_args=tuple(train_args),
        env_bin=str(Path(sys.executable).parent),
        profile_note=_profile_note(resolved.profile.name, resolved.profile_reason, gpus_per_node),
        max_nodes=max_nodes if max_nodes and max_nodes > nodes else None,
    )


def _train_line(
    flags: Any,
    profile: str | None,
    gpus_per_node: int,
    overrides: list[str] | None,
    train_flags: list[str] | None,
) -> tuple[list[str], list[str]]:
    """(the --set values the job adds, the job's `trainforge train` arguments)."""
    # CPU processes talk over Gloo and stay on the CPU even on a node with a GPU (rank 1
    # would otherwise ask for cuda:1); the user's own --set values come later and win.
    cpu_sets = ["hardware.distributed_backend=gloo", "training.device=cpu"]
    sets = ([] if gpus_per_node else cpu_sets) + list(overrides or [])
    profile_words = ["--profile", profile] if profile and not flags.profile else []
    train_args = [*profile_words, *(w for item in sets for w in ("--set", item))]
    return sets, train_args + list(train_flags or [])


def _judge(
    config: Path,
    flags: Any,
    sets: list[str],
    profile: str | None,
    nodes: int,
    gpus_per_node: int,
    nproc: int,
) -> Any:
    """The config validated and planned for `nodes` nodes of `nproc` processes."""
    from trainforge.config import validate

    return validate(
        config,
        platform=target_platform(nodes, gpus_per_node),
        profile=profile,
        overrides=sets + flags.overrides,
        flags=flags.flags,
        flag_sources=flags.sources,
        world_size=nodes * nproc,
    )


def _check_options(
    time: str,
    partition: str | None,
    account: str | None,
    job_name: str | None,
    output_dir: str,
    sbatch_options: list[str] | None,
    gpus_per_node: int,
    procs_per_node: int | None,
) -> tuple[str, ...]:
    """Every option that can be judged without the config; the extra #SBATCH directives."""
    parse_time(time)
    for flag, value in (("--partition", partition), ("--account", account)):
        if value is not None:
            check_name(flag, value)
    if job_name is not None:
        check_name("--job-name", job_name, job_name=True)
    if "\n" in output_dir or not output_dir.strip():
        raise UserError(f"--output-dir {output_dir!r} is not a folder name", "give a folder path")
    extra = tuple(check_directive(d) for d in sbatch_options or [])
    if gpus_per_node and procs_per_node not in (None, gpus_per_node):
        raise UserError(
            f"--procs-per-node {procs_per_node} with --gpus-per-node {gpus_per_node}: GPU jobs "
            "run one process per GPU",
            "drop --procs-per-node (it is for CPU jobs, --gpus-per-node 0)",
        )
    return extra


def _profile_note(name: str, reason: str, gpus_per_node: int) -> str:
    if reason.startswith("auto:"):
        what = f"{gpus_per_node} GPUs" if gpus_per_node else "no GPU"
        reason = f"what profile: auto picks on a Slurm node with {what}"
    return f"{name} ({reason})"


def target_platform(nodes: int, gpus_per_node: int):
    """A compute node of the job as detection will see it: the config is checked against
    that, not against the login node `trainforge slurm` runs on (often without GPUs)."""
    from trainforge.hardware.platform import GpuInfo, Platform, SlurmInfo

    gpus = tuple(GpuInfo(i, "allocated GPU", 0.0, None) for i in range(gpus_per_node))
    return Platform(
        kind="cuda" if gpus_per_node else "cpu",
        device="cuda" if gpus_per_node else "cpu",
        arch=_stdlib_platform.machine(),
        os_name="linux",
        cpu_count=1,
        memory_gib=0.0,
        gpus=gpus,
        jetson=None,
        slurm=SlurmInfo(
            job_id="(new)",
            num_nodes=nodes,
            num_tasks=nodes,
            gpus_per_node=gpus_per_node or None,
            node_rank=None,
            partition=None,
            nodelist=None,
        ),
    )


def read_train_flags(words: list[str]):
    """The train flags of a job line (`config.flags.RunArgs`), or one line why not."""
    from trainforge.config import flags as run_flags

    flags = run_flags.parse(words)
    if flags.config is not None or flags.files:
        first = flags.config or flags.files[0]
        raise UserError(
            f"unexpected argument {str(first)!r} (one run config at most)",
            "flags take the form --name VALUE; see `trainforge train --help`",
        )
    if flags.resume is not None:
        raise UserError(
            "--resume is not a flag for a new job",
            "a stopped job continues with trainforge jobs resume NAME",
        )
    return flags


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the words of the command's own options and the config, the train flags)."""
    from trainforge.config import flags as run_flags

    own, rest, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        name, eq, _ = token[2:].partition("=") if token.startswith("--") else ("", "", "")
        if name in SLURM_VALUE_OPTS:
            own += argv[i : i + (1 if eq else 2)]
            i += 0 if eq else 1
        elif name in SLURM_FLAGS or token in ("-h", "--help"):
            own.append(token)
        else:
            rest.append(token)
        i += 1
    # The config is the first word that is no flag and no flag's value: train's parser knows
    # which flags take values, so it finds it the way `trainforge train` would.
    config = run_flags.parse(list(rest)).config
    if config is not None:
        rest.remove(str(config))
        own.insert(0, str(config))
    return own, rest


def slurm_main(
    argv: list[str],
    *,
    send: Callable[[Path, dict], None] | None = None,
    prog: str = "trainforge slurm",
) -> int:
    """Run `trainforge slurm ARGV`; UserError propagates to the top-level handler. `send`
    takes the checked options instead of `sbatch` here (`--target`)."""
    own, words = split_args(argv)
    if "-h" not in own and "--help" not in own:
        read_train_flags(words)  # an unknown flag is one line before anything else
    words_token, send_token = _TRAIN_WORDS.set(words), _SEND.set(send)
    try:
        return run_subapp(slurm_app, own, prog)
    finally:
        _TRAIN_WORDS.reset(words_token)
        _SEND.reset(send_token)
