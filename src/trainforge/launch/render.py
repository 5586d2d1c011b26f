"""`trainforge render skypilot|kubeflow CONFIG`: the same validated run as a job file for an
engine that schedules it: a SkyPilot task YAML, or a Kubeflow Trainer v2 `TrainJob`.

trainforge renders and never schedules across machines itself. Each file runs the one
training command every launcher uses: `python -m trainforge.launch.torchrun` (torchrun with
trainforge's quiet planned stops) starting `trainforge train CONFIG --resume auto`, so a
relaunch after a preemption or a lost node continues the run folder instead of refusing it.

The files are written as plain data (dicts dumped to YAML) rather than through SkyPilot's
or Kubeflow's Python APIs: both libraries are heavy optional installs (SkyPilot alone pulls
~40 packages and pins click), and rendering must work on a laptop without them. The tests
parse the output with each library's own loader (`sky.Task.from_yaml`, the
`kubeflow-trainer-api` models) in an environment that has them.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainforge.errors import UserError

RDZV_PORT = 29500
# The GPU a profile's machine has, in SkyPilot's names, from each profile's own description:
# hpc-a100 is the assets README's A100 node; workstation-24gb a 24 GB GPU (RTX 4090 class;
# the clouds' 24 GB parts are the L4 and the A10G: either will do). Jetson and DGX Spark are
# devices, not cloud or cluster machines.
PROFILE_GPUS = {"hpc-a100": ("A100",), "workstation-24gb": ("L4", "A10G")}
DEFAULT_GPUS = ("A100",)
DEVICE_PROFILES = ("jetson-orin", "dgx-spark")
KUBEFLOW_RUNTIME = "torch-distributed"
_GPU_RE = re.compile(r"^[A-Za-z0-9-]+$")


@dataclass(frozen=True)
class Launch:
    """One run as a multi-node job: what every rendered file says."""

    config: str
    name: str
    nodes: int
    gpus_per_node: int  # 0: a CPU job of `procs_per_node` processes a node
    procs_per_node: int
    accelerators: dict[str, int] | None  # GPU name -> per node, any one of them; None: CPU
    train_args: tuple[str, ...] = ()

    def train_command(self, nnodes: str, nproc: str, rank: str, addr: str) -> str:
        """The shell line that starts the training processes of one node (shell words)."""
        args = ["--resume", "auto", *self.train_args]
        return (
            f"python -m trainforge.launch.torchrun --nnodes {nnodes} --nproc-per-node {nproc} "
            f"--node-rank {rank} --master-addr {addr} --master-port {RDZV_PORT} "
            f"-m trainforge train {shlex.quote(self.config)} {shlex.join(args)}"
        )


def _name(raw: str) -> str:
    """A name both engines take: lower case, digits and '-' (a Kubernetes object name)."""
    return re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:50] or "trainforge"


def build_launch(
    config: Path,
    *,
    nodes: int,
    gpus_per_node: int,
    procs_per_node: int | None = None,
    gpu: str | None = None,
    profile: str | None = None,
    overrides: list[str] | None = None,
) -> Launch:
    """Check the options and the config (for the processes the job will start); UserError."""
    from trainforge.config import validate
    from trainforge.launch.cli import target_platform

    # As typed: the job runs the project's copy at that relative path (config/ may be a link).
    if Path(config).is_absolute() or os.path.normpath(config).startswith(".."):
        raise UserError(
            f"config {config} is not a path inside this project folder",
            "run this from the project folder with a relative path (e.g. config/x.yaml): the "
            "job runs the project's copy of it",
        )
    if nodes < 1 or gpus_per_node < 0:
        raise UserError(
            f"--nodes {nodes} --gpus-per-node {gpus_per_node}: a job needs a node or more",
            "e.g. --nodes 2 --gpus-per-node 8 (0: a CPU job)",
        )
    if profile in DEVICE_PROFILES:
        raise UserError(
            f"--profile {profile} is a device, not a cloud or cluster machine",
            "run it on the device (trainforge train), or render with --profile hpc-a100",
        )
    if gpu is not None and not _GPU_RE.match(gpu):
        raise UserError(f"--gpu {gpu!r}: not a GPU name", "e.g. --gpu H100 (SkyPilot's names)")
    kinds = (gpu,) if gpu else PROFILE_GPUS.get(profile or "", DEFAULT_GPUS)
    nproc = gpus_per_node or procs_per_node or 1
    cpu_sets = [] if gpus_per_node else ["hardware.distributed_backend=gloo", "training.device=cpu"]
    sets = cpu_sets + list(overrides or [])
    resolved = validate(  # judged, and planned, for the processes the job starts
        config,
        platform=target_platform(nodes, gpus_per_node),
        profile=profile,
        overrides=sets,
        world_size=nodes * nproc,
    )
    args = (["--profile", profile] if profile else []) + [w for s in sets for w in ("--set", s)]
    return Launch(
        config=str(config),
        name=_name(resolved.config.name or Path(config).stem),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        procs_per_node=nproc,
        accelerators={k: gpus_per_node for k in kinds} if gpus_per_node else None,
        train_args=tuple(args),
    )


def skypilot_task(launch: Launch, bucket: str | None = None) -> dict[str, Any]:
    """A SkyPilot task: resources, `num_nodes`, the project as `workdir`, the run folders on a
    mounted bucket, and `run:` the torchrun line with SkyPilot's node variables."""
    bucket = bucket or _name(f"trainforge-runs-{getpass.getuser()}")
    nproc = "$SKYPILOT_NUM_GPUS_PER_NODE" if launch.gpus_per_node else str(launch.procs_per_node)
    resources: dict[str, Any] = {"cpus": f"{2 * launch.procs_per_node}+"}
    if launch.accelerators:
        # One kind is SkyPilot's `NAME:COUNT`; several, a set of which any one will do.
        (kind, count), *more = launch.accelerators.items()
        resources = {"accelerators": dict(launch.accelerators) if more else f"{kind}:{count}"}
    command = launch.train_command(
        '"$SKYPILOT_NUM_NODES"', f'"{nproc}"', '"$SKYPILOT_NODE_RANK"', '"$MASTER_ADDR"'
    )
    return {
        "name": launch.name,
        "num_nodes": launch.nodes,
        "resources": resources,
        "workdir": ".",
        # The run folders outlive the machines: a relaunch finds its checkpoints there.
        "file_mounts": {"~/sky_workdir/runs": {"name": bucket, "mode": "MOUNT"}},
        "setup": "python -m pip install -e '.[all]'",
        "run": "\n".join(
            [
                "set -eu",
                'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
                "export PYTHONUNBUFFERED=1",
                command,
            ]
        )
        + "\n",
    }


def kubeflow_trainjob(launch: Launch, image: str) -> dict[str, Any]:
    """A Kubeflow Trainer v2 `TrainJob` on the `torch-distributed` runtime, which sets the
    rendezvous through torchrun's own PET_* variables (read by trainforge's torchrun too)."""
    limits: dict[str, str] = {"cpu": str(max(1, launch.procs_per_node))}
    if launch.gpus_per_node:
        limits = {"nvidia.com/gpu": str(launch.gpus_per_node)}
    train = ["python", "-m", "trainforge.launch.torchrun", "-m", "trainforge", "train"]
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": launch.name},
        "spec": {
            "runtimeRef": {"name": KUBEFLOW_RUNTIME},
            "trainer": {
                "image": image,
                "numNodes": launch.nodes,
                "numProcPerNode": launch.procs_per_node,
                "command": [*train, launch.config, "--resume", "auto", *launch.train_args],
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                "resourcesPerNode": {"limits": limits},
            },
        },
    }


def to_yaml(data: dict[str, Any], header: list[str]) -> str:
    """The document with `# ` header lines; multi-line strings as YAML blocks."""

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100)
    return "".join(f"# {line}\n" for line in header) + body
