"""A real Slurm cluster on this machine: one node, or two nodes in network namespaces.

Owns starting and stopping the daemons for the `slurm` tests (tests/launch/conftest.py) and
the recovery benchmark (benchmarks/recovery.py), which start a cluster themselves.

Debian's `slurm-wlm` and `munge` packages (`make test-slurm` installs them), started as root
with every file under one folder: munged with its own key and socket, slurmctld and slurmd in
the foreground on free ports. Process tracking is `proctrack/linuxproc` and task binding
`task/none`, so no cgroup delegation is needed (containers rarely have it).

- `single_node(root)`: one node named after `hostname -s`, on this machine's own network.
- `two_nodes(root)`: slurmctld on this machine, and two slurmd, `node1` and `node2`, each in
  its own network namespace (`ip netns`) and UTS namespace (`unshare --uts`, so `hostname`
  says the node's name), joined to this machine by a bridge. munged's socket is a file, and
  the namespaces share the file system, so one munged serves all. Each slurmd also gets its
  own mount namespace with /etc/netns/NS/hosts over /etc/hosts (as `ip netns exec` does),
  which is how a node resolves `node1`/`node2` (the batch script's rendezvous host).
  `lose_node()` cuts a node's link and SIGKILLs every process in its namespace, as a machine
  that loses power; `restore_node()` brings it back.

Written by hand: no Python library starts a throw-away Slurm. The Slurm project's own test
suite (testsuite/) needs an installed, configured cluster; docker-based clusters (e.g.
giovtorres/slurm-docker-cluster) need a container runtime CI does not have.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo")
# A requeued job may start again only after its credentials expired: cred_expire + 1 s
# (Slurm's default is 120 s). 10 s keeps the requeue tests short.
CRED_EXPIRE_S = 10
# How long slurmctld waits for a silent slurmd before it marks the node DOWN and requeues its
# jobs (NODE_FAIL); Slurm's default is 300 s. It pings every third of this.
SLURMD_TIMEOUT_S = 10
TWO_NODES = ("node1", "node2")


class ClusterError(RuntimeError):
    """The cluster could not be started here (one line: what is missing and the fix)."""


@dataclass
class SlurmCluster:
    root: Path
    nodes: tuple[str, ...]
    env: dict[str, str]
    logs: list[Path] = field(default_factory=list)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)  # node -> network namespace
    links: dict[str, str] = field(default_factory=dict)  # node -> its veth on this side

    @property
    def node(self) -> str:
        return self.nodes[0]

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        done = subprocess.run(
            list(args), capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {done.stderr or done.stdout}")
        return done.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, NodeList, ...)."""
        text = self.run("scontrol", "-o", "show", "job", job_id)
        pairs = (item.split("=", 1) for item in text.split() if "=" in item)
        return {key: value for key, value in pairs}

    def node_states(self) -> dict[str, str]:
        """`sinfo` per node: {"node1": "idle", "node2": "down*", ...}."""
        text = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split(None, 1) for line in text.splitlines() if " " in line)

    def daemon_logs(self) -> str:
        parts = []
        for path in self.logs:
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-40:]
                parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = self.root / "log" / f"{name}.out"
        if log not in self.logs:
            self.logs.append(log)
        with log.open("a") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.root
            )
        self.procs[name] = proc
        return proc

    def start_slurmd(self, node: str) -> None:
        conf = str(self.root / "slurm.conf")
        if node not in self.namespaces:
            self.start("slurmd", ["slurmd", "-D", "-f", conf])
            return
        # The node's own network, host name (slurmd -N names the node, and `hostname` in the
        # job says the same) and /etc/hosts. Not `ip netns exec`: it mounts a fresh /sys,
        # without the cgroup file system slurmd reads at start.
        namespace = self.namespaces[node]
        script = (
            f"mount --bind /etc/netns/{namespace}/hosts /etc/hosts && hostname {node} && "
            f"exec slurmd -D -N {node} -f {conf}"
        )
        argv = ["nsenter", f"--net=/run/netns/{namespace}", "unshare", "--mount", "--uts"]
        self.start(f"slurmd-{node}", [*argv, "sh", "-c", script])

    def lose_node(self, node: str) -> None:
        """The node's machine fails: its link goes dark first (so no peer sees a connection
        close), then slurmd, the job's steps and training processes are SIGKILLed."""
        _ip("link", "set", self.links[node], "down")
        namespace = self.namespaces[node]
        for _ in range(3):  # a dying slurmstepd may still have forked: look again
            pids = _ip("netns", "pids", namespace).split()
            for pid in pids:
                with suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.2)
        proc = self.procs.get(f"slurmd-{node}")
        if proc is not None:
            proc.wait(timeout=30)

    def restore_node(self, node: str) -> None:
        """The machine is back: link up, slurmd started again (ReturnToService=2 takes it in)."""
        _ip("link", "set", self.links[node], "up")
        self.start_slurmd(node)

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise ClusterError(f"{name} exited ({proc.returncode}):\n{self.daemon_logs()}")
            states = self.node_states()
            if set(states) == set(self.nodes) and set(states.values()) == {"idle"}:
                return
            time.sleep(0.5)
        raise ClusterError(f"Slurm nodes never became idle ({states}):\n{self.daemon_logs()}")

    def cancel_all(self) -> None:
        self.run("scancel", "--partition=debug", check=False)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if not self.run("squeue", "-h", "-o", "%i", check=False).strip():
                return
            time.sleep(1)


def missing_requirements() -> str | None:
    """Why a cluster cannot start here (one line naming the fix), or None."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed: `make test-slurm` installs slurm-wlm and munge"
    if os.geteuid() != 0:
        return "the Slurm cluster starts slurmd as root: run it as root"
    return None


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _slurm_conf(root: Path, munge: Path, ctld: str, node_lines: list[str], kill_wait_s: int):
    nodes = ",".join(line.split()[0].split("=")[1] for line in node_lines)
    return f"""\
ClusterName=trainforge-test
SlurmctldHost={ctld}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}/munge.socket,cred_expire={CRED_EXPIRE_S}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
# A requeued job starts within 2 s of being eligible (defaults: 30 s backfill, 60 s main pass).
SchedulerParameters=bf_interval=2,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout={SLURMD_TIMEOUT_S}
MinJobAge=600
KillWait={kill_wait_s}
{chr(10).join(node_lines)}
PartitionName=debug Nodes={nodes} Default=YES MaxTime=INFINITE State=UP
"""


def _start_munge(cluster: SlurmCluster) -> Path:
    # munged wants every folder above its socket open to all (pytest's base folder is not).
    munge = Path(tempfile.mkdtemp(prefix="trainforge-munge-"))
    munge.chmod(0o755)
    key = munge / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    cluster.start(
        "munged",
        ["munged", "--foreground", f"--key-file={key}", f"--socket={munge}/munge.socket",
         f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/munged.seed"],
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not (munge / "munge.socket").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return munge


def _prepare(root: Path, nodes: tuple[str, ...]) -> SlurmCluster:
    reason = missing_requirements()
    if reason:
        raise ClusterError(reason)
    for sub in ("state", "log", *(f"spool/{n}" for n in nodes)):
        (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    # No cgroup plugin is loaded (proctrack/linuxproc, task/none); slurmd still reads the file.
    (root / "cgroup.conf").write_text("ConstrainCores=no\nConstrainRAMSpace=no\n")
    env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
    return SlurmCluster(root=root, nodes=nodes, env=env)


@contextmanager
def _running(cluster: SlurmCluster, munge: Path, conf: str) -> Iterator[SlurmCluster]:
    """Start slurmctld and the slurmds; on the way out cancel every job and stop them all."""
    (cluster.root / "slurm.conf").write_text(conf, encoding="utf-8")
    try:
        cluster.logs.append(cluster.root / "log/slurmctld.log")
        cluster.logs += [cluster.root / f"log/slurmd-{n}.log" for n in cluster.nodes]
        conf_path = str(cluster.root / "slurm.conf")
        cluster.start("slurmctld", ["slurmctld", "-D", "-i", "-f", conf_path])
        for node in cluster.nodes:
            cluster.start_slurmd(node)
        cluster.wait_idle()
        yield cluster
    finally:
        if "slurmctld" in cluster.procs:
            cluster.cancel_all()
        for proc in reversed(list(cluster.procs.values())):
            _stop(proc)
        shutil.rmtree(munge, ignore_errors=True)


@contextmanager
def single_node(root: Path) -> Iterator[SlurmCluster]:
    """One node, this machine (`hostname -s`), 2 CPUs."""
    node = socket.gethostname().split(".")[0]
    cluster = _prepare(root, (node,))
    munge = _start_munge(cluster)
    conf = _slurm_conf(root, munge, node, [f"NodeName={node} CPUs=2 State=UNKNOWN"], 30)
    with _running(cluster, munge, conf):
        yield cluster


@contextmanager
def two_nodes(root: Path) -> Iterator[SlurmCluster]:
    """`node1` and `node2`, 2 CPUs each (this machine's 2 cores, shared), in their own
    network namespaces on a bridge; slurmctld on this machine at the bridge's address."""
    cluster = _prepare(root, TWO_NODES)
    tag = f"tf{os.getpid() % 100000}"
    subnet = f"10.231.{os.getpid() % 250}"
    addresses = {node: f"{subnet}.{i + 2}" for i, node in enumerate(TWO_NODES)}
    try:
        _network(cluster, tag, subnet, addresses)
        munge = _start_munge(cluster)
        ctld = socket.gethostname().split(".")[0]
        lines = [f"NodeName={n} NodeAddr={a} CPUs=2 State=UNKNOWN" for n, a in addresses.items()]
        # A lost node's job steps on the other node stop within seconds (default 30 s).
        conf = _slurm_conf(root, munge, f"{ctld}({subnet}.1)", lines, 5)
        with _running(cluster, munge, conf):
            yield cluster
    finally:
        _remove_network(cluster, tag)


def _network(cluster: SlurmCluster, tag: str, subnet: str, addresses: dict[str, str]) -> None:
    bridge = f"{tag}br"
    _ip("link", "add", bridge, "type", "bridge")
    _ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
    _ip("link", "set", bridge, "up")
    # Also each address as IPv6 sees an IPv4 peer: torch's c10d store names its clients
    # through getnameinfo, which would otherwise ask a DNS server the namespaces cannot reach.
    hosts = "127.0.0.1 localhost\n" + "".join(
        f"{a} {n}\n::ffff:{a} {n}\n" for n, a in addresses.items()
    )
    for node, address in addresses.items():
        namespace, outside = f"{tag}{node}", f"{tag}{node[-1]}v"
        _ip("netns", "add", namespace)
        cluster.namespaces[node] = namespace
        (Path("/etc/netns") / namespace).mkdir(parents=True, exist_ok=True)
        (Path("/etc/netns") / namespace / "hosts").write_text(hosts, encoding="utf-8")
        _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        cluster.links[node] = outside
        _ip("link", "set", outside, "master", bridge)
        _ip("link", "set", outside, "up")
        inside = ("netns", "exec", namespace, "ip")
        _ip(*inside, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "link", "set", "lo", "up")


def _remove_network(cluster: SlurmCluster, tag: str) -> None:
    for node, namespace in cluster.namespaces.items():
        if node in cluster.links:
            subprocess.run(["ip", "link", "del", cluster.links[node]], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        shutil.rmtree(Path("/etc/netns") / namespace, ignore_errors=True)
    subprocess.run(["ip", "link", "del", f"{tag}br"], capture_output=True, timeout=30)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
