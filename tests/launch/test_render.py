"""`trainforge render skypilot|kubeflow`: the same validated run as another scheduler's job
file. The fast cases read the YAML back; the slow case parses both files with SkyPilot's and
the Kubeflow Trainer API's own loaders, installed for the test into a venv of their own (they
are optional, and SkyPilot pins packages trainforge's own environment must not take)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from tests.fakes.in_process import run_in_process

REPO = Path(__file__).resolve().parents[2]


def render(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(REPO)
    return run_in_process(monkeypatch, capsys, "render", *args)


def test_skypilot_task_has_the_nodes_resources_mount_and_the_torchrun_line(monkeypatch, capsys):
    code, out, err = render(
        monkeypatch, capsys, "skypilot", "config/vit_digits.yaml", "--nodes", "2",
        "--gpus-per-node", "4", "--profile", "hpc-a100", "--set", "training.seed=3",
    )  # fmt: skip
    assert code == 0, err
    task = yaml.safe_load(out)
    assert task["num_nodes"] == 2 and task["resources"] == {"accelerators": "A100:4"}
    assert task["workdir"] == "." and task["file_mounts"]["~/sky_workdir/runs"]["mode"] == "MOUNT"
    run = task["run"]
    assert '--nnodes "$SKYPILOT_NUM_NODES" --nproc-per-node "$SKYPILOT_NUM_GPUS_PER_NODE"' in run
    assert '--node-rank "$SKYPILOT_NODE_RANK" --master-addr "$MASTER_ADDR"' in run
    assert run.rstrip().endswith(
        "-m trainforge train config/vit_digits.yaml --resume auto --profile hpc-a100 "
        "--set training.seed=3"
    )
    assert out.startswith("# trainforge: config/vit_digits.yaml on 2 node(s)")


def test_a_24gb_profile_takes_either_cloud_24gb_gpu_and_cpu_jobs_take_cpus(monkeypatch, capsys):
    code, out, err = render(
        monkeypatch, capsys, "skypilot", "config/vit_digits.yaml", "--gpus-per-node", "1",
        "--profile", "workstation-24gb",
    )  # fmt: skip
    assert code == 0, err
    assert yaml.safe_load(out)["resources"] == {"accelerators": {"L4": 1, "A10G": 1}}
    code, out, err = render(
        monkeypatch, capsys, "skypilot", "config/vit_digits.yaml", "--gpus-per-node", "0",
        "--procs-per-node", "2",
    )  # fmt: skip
    assert code == 0, err
    task = yaml.safe_load(out)
    assert task["resources"] == {"cpus": "4+"}
    assert '--nproc-per-node "2"' in task["run"] and "training.device=cpu" in task["run"]


def test_kubeflow_trainjob_runs_trainforge_on_the_torch_runtime(monkeypatch, capsys):
    code, out, err = render(
        monkeypatch, capsys, "kubeflow", "config/vit_digits.yaml", "--nodes", "3",
        "--gpus-per-node", "8", "--image", "registry.example.org/me/trainforge:1",
    )  # fmt: skip
    assert code == 0, err
    job = yaml.safe_load(out)
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    trainer = job["spec"]["trainer"]
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed"}
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 8)
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert trainer["command"][:6] == [
        "python", "-m", "trainforge.launch.torchrun", "-m", "trainforge", "train"
    ]  # fmt: skip
    assert trainer["command"][6:9] == ["config/vit_digits.yaml", "--resume", "auto"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["skypilot", "config/vit_digits.yaml", "--profile", "jetson-orin"], "is a device"),
        (["skypilot", "config/vit_digits.yaml", "--nodes", "0"], "a job needs a node or more"),
        (["skypilot", "config/vit_digits.yaml", "--gpu", "A100:8"], "not a GPU name"),
        (["kubeflow", str(REPO / "config" / "vit_digits.yaml")], "not a path inside this project"),
        (["kubeflow", "config/vit_digits.yaml", "--set", "training.seed=x"], "training.seed"),
    ],
)
def test_bad_input_is_one_line(monkeypatch, capsys, args, says):
    code, out, err = render(monkeypatch, capsys, *args)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert lines and says in err and "Traceback" not in err, err
    assert not out.strip()


def _extra(name: str) -> list[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return data["project"]["optional-dependencies"][name]


PARSE = """
import sys, yaml
import sky
from kubeflow_trainer_api import models
task = sky.Task.from_yaml(sys.argv[1])
assert task.num_nodes == 2, task.num_nodes
(resources,) = task.resources
assert resources.accelerators == {"A100": 4}, resources.accelerators
assert "trainforge train config/vit_digits.yaml --resume auto" in task.run
data = yaml.safe_load(open(sys.argv[2]))
job = models.TrainerV1alpha1TrainJob.from_dict(data)
assert job.spec.trainer.num_nodes == 2 and job.spec.runtime_ref.name == "torch-distributed"
# Every key was a field of the model: nothing was dropped on the way in.
assert job.to_dict() == data, (job.to_dict(), data)
print("parsed")
"""


@pytest.mark.slow
def test_both_files_parse_with_the_libraries_own_loaders(tmp_path, monkeypatch, capsys):
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    done = subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "-q", *_extra("render")],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sky_file, job_file = tmp_path / "sky.yaml", tmp_path / "job.yaml"
    common = ["config/vit_digits.yaml", "--nodes", "2", "--gpus-per-node", "4"]
    code, _, err = render(monkeypatch, capsys, "skypilot", *common, "-o", str(sky_file))
    assert code == 0, err
    code, _, err = render(monkeypatch, capsys, "kubeflow", *common, "-o", str(job_file))
    assert code == 0, err
    parsed = subprocess.run(
        [str(env / "bin" / "python"), "-c", PARSE, str(sky_file), str(job_file)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr[-3000:]
    assert parsed.stdout.strip().endswith("parsed")
