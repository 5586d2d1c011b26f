"""`trainforge targets check` against a real OpenSSH server on a loopback port (the login
node), reached with a key the fixture writes. Slurm's commands on that node are small
stand-in scripts that print what sinfo prints (`make test-slurm` checks the real Slurm);
everything between trainforge and the node is real: ssh, its shared connection, the login
shell, the setup line and the remote trainforge."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from trainforge.targets.remote import Remote
from trainforge.targets.spec import Target

VENV_BIN = Path(sys.executable).parent
SINFO = "debug*|up|1|1:00:00\ngpu|up|2|2-00:00:00\n"


def slurm_stand_ins(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("sbatch", "squeue", "sacct", "scancel"):
        (folder / tool).write_text("#!/bin/sh\nexit 0\n")
    (folder / "sinfo").write_text(f"#!/bin/sh\nprintf '{SINFO}'\n".replace("\n'", "\\n'"))
    for script in folder.iterdir():
        script.chmod(0o755)
    return folder


def core_tools(folder: Path) -> Path:
    """A PATH folder with the shell's basic tools and nothing of Slurm (this machine may
    have Slurm installed in /usr/bin)."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("mktemp", "head", "cut", "rm", "tr", "cat", "env"):
        (folder / tool).symlink_to(shutil.which(tool))
    return folder


def targets_file(tmp_path: Path, **targets: dict) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump({"targets": targets}), encoding="utf-8")
    return path


def check(path: Path, name: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "COLUMNS": "200"}
    env.pop("XDG_RUNTIME_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "trainforge", "targets", "check", name, "--targets", str(path)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_check_finds_slurm_the_remote_trainforge_and_the_partitions(login_node, tmp_path):
    tools = slurm_stand_ins(tmp_path / "slurm-bin")
    project = tmp_path / "project"
    project.mkdir()
    setup = f"export PATH={tools}:$PATH && source {VENV_BIN}/activate"
    fields = login_node.target_fields(remote_dir=str(project), setup=setup, partition="gpu")
    path = targets_file(tmp_path, hpc=fields)
    done = check(path, "hpc", tmp_path / "home")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"target hpc: root@127.0.0.1:{login_node.port}, project folder {project}"
    assert f"slurm: {tools}/sbatch, {tools}/sinfo" in done.stdout
    assert any(line.startswith("remote: trainforge ") for line in lines)
    assert "partition debug (default): up, 1 nodes, time limit 1:00:00" in lines
    assert "partition gpu: up, 2 nodes, time limit 2-00:00:00" in lines
    assert lines[-1] == "target hpc: ready"


def test_one_connection_is_shared_and_kept_for_the_next_command(login_node, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    remote = Remote(Target(name="n", **login_node.target_fields()))
    first = remote.run("echo $SSH_CONNECTION")
    second = remote.run("echo $SSH_CONNECTION")
    assert first.code == 0 and first.out.strip()
    # The master stays up after the first command, and the second one went through it.
    master = subprocess.run(
        [*remote.ssh_words(), "-O", "check", "127.0.0.1"], capture_output=True, text=True
    )
    assert master.returncode == 0, master.stderr
    assert "Master running" in master.stderr
    assert first.out == second.out  # the same TCP connection (same client port)
    subprocess.run([*remote.ssh_words(), "-O", "exit", "127.0.0.1"], capture_output=True)


def test_faults_are_one_line_with_the_fix(login_node, tmp_path):
    tools = slurm_stand_ins(tmp_path / "slurm-bin")
    activate = f"export PATH={tools}:$PATH && source {VENV_BIN}/activate"
    other_key = tmp_path / "other_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True
    )
    base = login_node.target_fields(setup=activate)
    closed_port = login_node.port + 1 if login_node.port < 65535 else login_node.port - 1
    path = targets_file(
        tmp_path,
        unreachable={**base, "port": closed_port},
        refused={**base, "identity_file": str(other_key)},
        no_trainforge={**base, "setup": f"export PATH={tools}:/usr/bin:/bin"},
        no_slurm={**base, "setup": f"export PATH={core_tools(tmp_path / 'core')}:{VENV_BIN}"},
        bad_partition={**base, "partition": "a100"},
        no_folder={**base, "remote_dir": str(tmp_path / "missing")},
        bad_setup={**base, "setup": "module load nothing-here"},
    )
    home = tmp_path / "home"
    said = {name: one_line(check(path, name, home)) for name in (
        "unreachable", "refused", "no_trainforge", "no_slurm", "bad_partition", "no_folder",
        "bad_setup",
    )}  # fmt: skip
    assert said["unreachable"].startswith(
        f"target unreachable: cannot reach root@127.0.0.1:{closed_port}"
    )
    assert "refused the key" in said["refused"] and "ssh-copy-id -p" in said["refused"]
    assert "never asks for or stores passwords" in said["refused"]
    assert "trainforge is not installed on root@127.0.0.1" in said["no_trainforge"]
    assert "no sbatch, sinfo, squeue, sacct, scancel on" in said["no_slurm"]
    assert "partition a100 does not exist on root@127.0.0.1" in said["bad_partition"]
    assert "(there: debug, gpu)" in said["bad_partition"]
    assert f"remote_dir {tmp_path / 'missing'} does not exist" in said["no_folder"]
    assert "the setup line failed" in said["bad_setup"] and "module" in said["bad_setup"]


def test_a_full_remote_disk_during_the_copy_is_one_line_and_nothing_is_submitted(
    login_node, tmp_path, monkeypatch
):
    """The project folder on the cluster is a full tmpfs: the copy fails, the line says to
    free space, and sbatch (a stand-in that leaves a mark) never runs."""
    tools = slurm_stand_ins(tmp_path / "slurm-bin")
    mark = tmp_path / "sbatch-ran"
    (tools / "sbatch").write_text(f"#!/bin/sh\ntouch {mark}\necho 1\n")
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        # Fill it: the last write fails with ENOSPC, as a full disk does.
        subprocess.run(["dd", "if=/dev/zero", f"of={full}/filler", "bs=4k"], capture_output=True)
        project = tmp_path / "project"
        (project / "config").mkdir(parents=True)
        shutil.copy(
            Path(__file__).resolve().parents[2] / "config/vit_digits.yaml", project / "config"
        )
        setup = f"export PATH={tools}:$PATH && source {VENV_BIN}/activate"
        path = targets_file(
            tmp_path, hpc=login_node.target_fields(remote_dir=str(full), setup=setup)
        )
        env = {
            **os.environ,
            "HOME": str(tmp_path / "home"),
            "TRAINFORGE_JOBS": str(tmp_path / "j.json"),
        }
        env.pop("XDG_RUNTIME_DIR", None)
        done = subprocess.run(
            [sys.executable, "-m", "trainforge", "jobs", "submit", "config/vit_digits.yaml",
             "--target", "hpc", "--time", "00:10:00", "--targets", str(path)],
            cwd=project, capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        line = one_line(done)
        assert "No space left on device" in line and "nothing was submitted" in line, line
        assert "free space in the project folder on the cluster" in line
        assert not mark.exists() and not (tmp_path / "j.json").exists()
    finally:
        subprocess.run(["umount", str(full)], check=False)


def test_jobs_submit_writes_the_script_there_and_records_the_job(login_node, tmp_path):
    """`trainforge jobs submit CONFIG --target NAME` over the real sshd (sbatch a stand-in
    that keeps the script it was given): the config is copied, the script puts the cluster's
    trainforge first on PATH, and `trainforge jobs --json` knows the job."""
    tools = slurm_stand_ins(tmp_path / "slurm-bin")
    kept = tmp_path / "submitted.sbatch"
    (tools / "sbatch").write_text(f'#!/bin/sh\ncp "$2" {kept}\necho 4242\n')
    remote_project, project = tmp_path / "cluster-project", tmp_path / "project"
    remote_project.mkdir()
    (project / "config").mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[2] / "config/vit_digits.yaml", project / "config")
    setup = f"export PATH={tools}:$PATH && source {VENV_BIN}/activate"
    fields = login_node.target_fields(remote_dir=str(remote_project), setup=setup, partition="gpu")
    path = targets_file(tmp_path, hpc=fields)
    env = {
        **os.environ, "HOME": str(tmp_path / "home"), "TRAINFORGE_TARGETS": str(path),
        "TRAINFORGE_JOBS": str(tmp_path / "jobs.json"),
    }  # fmt: skip
    env.pop("XDG_RUNTIME_DIR", None)
    done = subprocess.run(
        [sys.executable, "-m", "trainforge", "jobs", "submit", "config/vit_digits.yaml",
         "--gpus-per-node", "0", "--time", "00:10:00", "--target", "hpc"],
        cwd=project, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Submitted batch job 4242 on hpc: run vit_digits" in done.stdout
    assert (remote_project / "config/vit_digits.yaml").read_bytes() == (
        project / "config/vit_digits.yaml"
    ).read_bytes()
    script = kept.read_text()
    assert f'export PATH="{VENV_BIN}:$PATH"' in script and "#SBATCH --partition=gpu" in script
    listed = subprocess.run(
        [sys.executable, "-m", "trainforge", "jobs", "--json"],
        cwd=project, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    (job,) = json.loads(listed.stdout)
    assert (job["name"], job["target"], job["job_id"]) == ("vit_digits", "hpc", "4242")
    assert job["run_dir"] == "runs/vit_digits" and job["options"]["time"] == "00:10:00"
