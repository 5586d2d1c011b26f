"""`trainforge render skypilot|kubeflow CONFIG`: the command line of `launch.render`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Render a run for another scheduler: a SkyPilot task or a Kubeflow TrainJob.",
)
ConfigArg = Annotated[Path, typer.Argument(help="The run config.")]
NodesOpt = Annotated[int, typer.Option("--nodes", help="Machines (nodes) in the job.")]
GpusOpt = Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node; 0 for a CPU job.")]
ProcsOpt = Annotated[
    int | None, typer.Option("--procs-per-node", help="CPU jobs: training processes per node.")
]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="Hardware profile name.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override any field (repeatable).")]
OutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write the file here (default: print it).")
]


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output}")


@app.command("skypilot")
def skypilot_command(
    config: ConfigArg,
    nodes: NodesOpt = 1,
    gpus_per_node: GpusOpt = 1,
    procs_per_node: ProcsOpt = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", help="GPU name in SkyPilot's terms (default: the profile's, else A100)."
        ),
    ] = None,
    bucket: Annotated[
        str | None,
        typer.Option("--bucket", help="Bucket that holds the run folders (default: per user)."),
    ] = None,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    output: OutputOpt = None,
) -> None:
    """A SkyPilot task YAML for `sky launch` (or `sky jobs launch`, relaunched on preemption)."""
    from trainforge.launch.render import build_launch, skypilot_task, to_yaml

    launch = build_launch(
        config, nodes=nodes, gpus_per_node=gpus_per_node, procs_per_node=procs_per_node,
        gpu=gpu, profile=profile, overrides=set_ or [],
    )  # fmt: skip
    header = [
        f"trainforge: {config} on {nodes} node(s), rendered by `trainforge render skypilot`.",
        "Run it: sky launch -c NAME THIS.yaml, or sky jobs launch THIS.yaml (a preempted job",
        "is relaunched and the run continues from its newest checkpoint in the bucket).",
    ]
    _write(to_yaml(skypilot_task(launch, bucket), header), output)


@app.command("kubeflow")
def kubeflow_command(
    config: ConfigArg,
    nodes: NodesOpt = 1,
    gpus_per_node: GpusOpt = 1,
    procs_per_node: ProcsOpt = None,
    image: Annotated[
        str, typer.Option("--image", help="Container image with trainforge and the project.")
    ] = "trainforge:latest",
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    output: OutputOpt = None,
) -> None:
    """A Kubeflow Trainer v2 TrainJob: `kubectl apply -f` it where the Trainer runs."""
    from trainforge.launch.render import build_launch, kubeflow_trainjob, to_yaml

    launch = build_launch(
        config, nodes=nodes, gpus_per_node=gpus_per_node, procs_per_node=procs_per_node,
        profile=profile, overrides=set_ or [],
    )  # fmt: skip
    header = [
        f"trainforge: {config} on {nodes} node(s), rendered by `trainforge render kubeflow`.",
        "Apply it: kubectl apply -f THIS.yaml (needs the torch-distributed runtime). Mount a",
        "persistent volume at the image's runs/ folder so a restarted job finds its run.",
    ]
    _write(to_yaml(kubeflow_trainjob(launch, image), header), output)


def main(argv: list[str]) -> int:
    from trainforge.subapp import run_subapp

    return run_subapp(app, argv, "trainforge render")
