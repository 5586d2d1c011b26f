"""A real single-node Slurm cluster on this machine, for the `slurm` tests.

Debian's `slurm-wlm` and `munge` packages (`make test-slurm` installs them), started as root
with every file under a temporary folder: munged with its own key and socket, slurmctld and
slurmd in the foreground on free ports, one node named after `hostname -s` with 2 CPUs.
Process tracking is `proctrack/linuxproc` and task binding `task/none`, so no cgroup
delegation is needed (containers rarely have it). The fixture waits for `sinfo` to show the
node idle, and afterwards cancels every job, waits for them to end and stops the daemons.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo")
# A requeued job may start again only after its credentials expired: cred_expire + 1 s
# (Slurm's default is 120 s). 10 s keeps the requeue test short.
CRED_EXPIRE_S = 10


@dataclass
class SlurmCluster:
    root: Path
    node: str
    env: dict[str, str]
    logs: list[Path] = field(default_factory=list)

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        done = subprocess.run(
            list(args), capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {done.stderr or done.stdout}")
        return done.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...)."""
        text = self.run("scontrol", "-o", "show", "job", job_id)
        pairs = (item.split("=", 1) for item in text.split() if "=" in item)
        return {key: value for key, value in pairs}

    def daemon_logs(self) -> str:
        parts = []
        for path in self.logs:
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-40:]
                parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _slurm_conf(root: Path, munge: Path, node: str, ctld_port: int, slurmd_port: int) -> str:
    return f"""\
ClusterName=trainforge-test
SlurmctldHost={node}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}/munge.socket,cred_expire={CRED_EXPIRE_S}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
KillWait=30
NodeName={node} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _wait_idle(cluster: SlurmCluster, procs: list[subprocess.Popen], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"{proc.args[0]} exited ({proc.returncode}):\n{cluster.daemon_logs()}")
        state = cluster.run("sinfo", "-h", "-N", "-o", "%T", check=False).strip()
        if state == "idle":
            return
        time.sleep(0.5)
    pytest.fail(f"the Slurm node never became idle (sinfo: {state!r}):\n{cluster.daemon_logs()}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _cancel_all(cluster: SlurmCluster) -> None:
    cluster.run("scancel", "--partition=debug", check=False)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if not cluster.run("squeue", "-h", "-o", "%i", check=False).strip():
            return
        time.sleep(1)


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: `make test-slurm` installs slurm-wlm and munge"
        )
    if os.geteuid() != 0:
        pytest.fail("the Slurm harness starts slurmd as root: run the slurm tests as root")
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(mode=0o700)
    # munged wants every folder above its socket open to all (pytest's base folder is not).
    munge = Path(tempfile.mkdtemp(prefix="trainforge-munge-"))
    munge.chmod(0o755)
    key = munge / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    node = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, munge, node, _free_port(), _free_port()), encoding="utf-8")
    # No cgroup plugin is loaded (proctrack/linuxproc, task/none); slurmd still reads the file.
    (root / "cgroup.conf").write_text("ConstrainCores=no\nConstrainRAMSpace=no\n")
    env = dict(os.environ, SLURM_CONF=str(conf))
    cluster = SlurmCluster(root=root, node=node, env=env)
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> None:
        log = root / "log" / f"{name}.out"
        cluster.logs.append(log)
        with log.open("w") as out:
            procs.append(
                subprocess.Popen(
                    [name, *args], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root
                )
            )

    try:
        start(
            "munged", "--foreground", f"--key-file={key}", f"--socket={munge}/munge.socket",
            f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/munged.seed",
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not (munge / "munge.socket").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.logs += [root / "log/slurmctld.log", root / "log/slurmd.log"]
        start("slurmctld", "-D", "-i", "-f", str(conf))
        start("slurmd", "-D", "-f", str(conf))
        _wait_idle(cluster, procs)
        yield cluster
    finally:
        if procs:
            _cancel_all(cluster)
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(munge, ignore_errors=True)
