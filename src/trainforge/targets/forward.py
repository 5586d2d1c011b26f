"""What `--target NAME` does to a command that renders a cluster job (`trainforge slurm`,
`trainforge sweep --slurm`): the words without it, and the function that submits the checked
job on that target and says how to follow it. `--target local` is this machine.

The CLI's forwarding table (`cli.FORWARDED`) names these; nothing here is imported before a
job is submitted (the target store, SSH)."""

from __future__ import annotations

from pathlib import Path

from trainforge.errors import UserError


def target_of(argv: list[str]) -> tuple[tuple[str, Path | None] | None, list[str]]:
    """((target name, targets file) when --target names a cluster, the other words).
    `--target local` is this machine: the words train as they would without it."""
    name, file, rest, i = None, None, [], 0
    while i < len(argv):
        word = argv[i]
        key, eq, value = word.partition("=")
        if key in ("--target", "--targets"):
            if not eq:
                if i + 1 >= len(argv):
                    raise UserError(f"{key} needs a value", f"write {key} NAME")
                i, value = i + 1, argv[i + 1]
            if key == "--target":
                name = value
            else:
                file = Path(value)
        else:
            rest.append(word)
        i += 1
    if name is None or name == "local":
        return None, rest
    return (name, file), rest


def send_to(name: str, file: Path | None):
    """What `slurm_main` calls with the checked options: submit them on the target (the
    configured one, checked first) and say how to follow the job."""

    def send(config: Path, options: dict) -> None:
        from trainforge.targets.store import get_target
        from trainforge.targets.submit import submit_run

        record = submit_run(get_target(name, file), config, **options)
        print(f"Submitted batch job {record.job_id} on {name}: run {record.name}")
        print(f"follow: trainforge jobs logs {record.name} -f   list: trainforge jobs")

    return send


def send_sweep_to(name: str, file: Path | None):
    """What `sweep_main` calls with a checked sweep: submit its job array on the target."""

    def send(plan: dict, own: dict) -> None:
        from trainforge.targets.store import get_target
        from trainforge.targets.submit import submit_sweep

        record, tasks = submit_sweep(get_target(name, file), plan, own)
        print(f"Submitted batch job {record.job_id} on {name} ({tasks} array tasks)")
        print(f"sweep {record.name}: trainforge sweep status {record.run_dir} (on the cluster)")
        print(f"follow: trainforge jobs logs {record.name} -f   list: trainforge jobs")

    return send
