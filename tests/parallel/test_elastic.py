"""Elastic jobs: two "nodes" (network namespaces, as in test_two_nodes), each running
`torchrun --nnodes 1:2 --max-restarts 3`, train one run. A node lost (its agent and workers
SIGKILLed) leaves the job going on the other node with fewer processes, continuing the run
from its newest checkpoint by itself, on the trajectory of one uninterrupted process; a node
that joins is taken in at the next rendezvous, the same way.

torchrun's rendezvous waits are shortened (`--rdzv-conf`, `--monitor-interval`) so that a
restart takes seconds, not the defaults' minutes. Needs root for `ip netns` (CI runs as root).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.fakes.interrupt import hold_script
from tests.parallel.test_ddp import REPO, TINY, run
from tests.parallel.test_two_nodes import two_nodes  # noqa: F401 (the fixture)

PORT = 29741
STEPS = 400
# Short rendezvous waits: a node lost is noticed by its missing keep-alives in 3 s, and a
# rendezvous closes 2 s after its minimum of nodes arrived.
RDZV = "join_timeout=120,last_call_timeout=2,close_timeout=10,keep_alive_interval=1,keep_alive_max_attempt=3"  # noqa: E501
DEADLINE_S = 600  # a hang, not speed: the deadlines only end a stuck test


def settings(tmp_path: Path, name: str, save_steps: int = 20) -> list[str]:
    sets = [*TINY, f"output.dir={tmp_path}", f"output.run_name={name}",
            "training.per_device_train_batch_size=64", f"training.max_steps={STEPS}",
            "logging.logging_steps=1", f"checkpoint.save_steps={save_steps}"]  # fmt: skip
    return [str(REPO / "config/vit_digits.yaml"), *(a for s in sets for a in ("--set", s))]


# An agent that has imported torch and waits for its gate file before it joins: a node that
# joins then arrives at once, while one process trains on (it would finish first otherwise).
GATED = """\
import pathlib, sys, time
import torch.distributed.run
from trainforge.launch.torchrun import main
gate = pathlib.Path(sys.argv[1])
while not gate.exists():
    time.sleep(0.05)
sys.exit(main(sys.argv[2:]))
"""


def agent(
    node: tuple[str, str],
    number: int,
    run_id: str,
    args: list[str],
    log: Path,
    gate=None,
    worker: list[str] | None = None,
    **env_extra: str,
) -> subprocess.Popen:
    """torchrun on `node` (namespace, link) through trainforge's wrapper, as the Slurm script
    starts it; node 1 hosts the rendezvous store. With a `gate`, it joins once that exists.
    `worker`: the workers' entry (default `-m trainforge`)."""
    name, link = node
    entry = ["-c", GATED, str(gate)] if gate else ["-m", "trainforge.launch.torchrun"]
    torchrun = [
        sys.executable, *entry, "--nnodes=1:2", "--nproc-per-node=1",
        "--max-restarts=3", "--monitor-interval=0.5", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=10.231.0.1:{PORT}", f"--local-addr=10.231.0.{number}",
        f"--rdzv-conf=is_host={int(number == 1)},{RDZV}", f"--rdzv-id={run_id}",
        *(worker or ["-m", "trainforge"]), "train", *args,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=link,
               **env_extra)  # fmt: skip
    return subprocess.Popen(
        ["ip", "netns", "exec", name, *torchrun], cwd=REPO, env=env,
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL an agent and every process under it: torchrun starts its workers in sessions
    of their own, so its process group does not hold them."""
    try:
        tree = [*psutil.Process(process.pid).children(recursive=True), psutil.Process(process.pid)]
    except psutil.NoSuchProcess:
        return
    for member in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    process.wait(timeout=60)


def train_losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r.get("split") == "train"}


def wait_for_step(run_dir: Path, step: int, agents: list[subprocess.Popen]) -> int:
    """The last logged train step once it reaches `step` (an event: the deadline is a hang)."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        if (run_dir / "metrics.jsonl").is_file():
            done = max(train_losses(run_dir), default=0)
            if done >= step:
                return done
        assert all(a.poll() is None for a in agents), "an agent ended before that step"
        time.sleep(0.1)
    pytest.fail(f"no train record at step {step} in {DEADLINE_S} s")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict[int, float]:
    """The uninterrupted run on one process: the trajectory both cases keep."""
    tmp_path = tmp_path_factory.mktemp("reference")
    done = run([sys.executable, "-m", "trainforge", "train", *settings(tmp_path, "one")])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return train_losses(tmp_path / "one")


def assert_on_trajectory(losses: dict[int, float], reference: dict[int, float], after: int):
    later = [step for step in losses if step > after]
    assert later and max(later) == STEPS, sorted(losses)[-5:]
    worst = max(abs(losses[s] - reference[s]) for s in later)
    assert worst <= 1e-4, f"largest loss difference after step {after}: {worst:.2e}"


def stop_all(agents: list[subprocess.Popen]) -> None:
    for process in agents:
        if process.poll() is None:
            kill_tree(process)


@pytest.mark.dist
@pytest.mark.parametrize(
    "save_steps", [20, 23], ids=["from-a-save-inside-an-epoch", "from-a-save-at-an-epochs-end"]
)
def test_a_lost_node_the_job_goes_on_with_one_process(two_nodes, tmp_path, one_process, save_steps):  # noqa: F811
    """Node 2 killed once step 40 is logged: node 1 goes on from the newest checkpoint. With
    a save every 23 steps, every checkpoint lies on an epoch's end (23 steps of 64, the last
    of 29), the moment where a resume on another split once trained the short step again."""
    run_dir = tmp_path / "lost"
    logs = [tmp_path / "node1.log", tmp_path / "node2.log"]
    args = settings(tmp_path, "lost", save_steps)
    agents = [agent(node, n, "lost", args, logs[n - 1]) for n, node in enumerate(two_nodes, 1)]
    try:
        wait_for_step(run_dir, 40, agents)
        kill_tree(agents[1])  # node 2 is gone: its agent and its worker, without a word
        code = agents[0].wait(timeout=DEADLINE_S)
    finally:
        stop_all(agents)
    output = logs[0].read_text()
    assert code == 0, output[-4000:]
    assert "torchrun restarted this job's processes (restart 1 of 3)" in output, output[-4000:]
    first, *_, last = json.loads((run_dir / "run.json").read_text())["segments"]
    assert first["world_size"] == 2 and last["world_size"] == 1
    assert last["restart_count"] >= 1 and last["launcher_job"] == "torchrun lost"
    assert last["resume"] == "continued" and last["end"] == "finished"
    assert last["from_step"] % save_steps == 0, last
    assert json.loads((run_dir / "summary.json").read_text())["global_step"] == STEPS
    assert_on_trajectory(train_losses(run_dir), one_process, last["from_step"])


@pytest.mark.dist
def test_a_node_that_joins_is_taken_in_at_the_next_rendezvous(two_nodes, tmp_path, one_process):  # noqa: F811
    run_dir = tmp_path / "joined"
    logs = [tmp_path / "node1.log", tmp_path / "node2.log"]
    args = settings(tmp_path, "joined")
    gate = tmp_path / "join"
    # Node 1 trains alone (its minimum of nodes) to the end of the first epoch (23 steps of
    # 64, the last of 29) and waits there for the restart the join brings: the new
    # rendezvous lands on the epoch's end on any machine, and the run then goes on with
    # the next epoch on two processes.
    held = [str(hold_script(tmp_path))]
    agents = [agent(two_nodes[0], 1, "joined", args, logs[0], worker=held, HOLD_AT_STEP="23"),
              agent(two_nodes[1], 2, "joined", args, logs[1], gate=gate)]  # fmt: skip
    try:
        wait_for_step(run_dir, 23, agents)
        gate.touch()  # node 2 joins
        codes = [process.wait(timeout=DEADLINE_S) for process in agents]
    finally:
        stop_all(agents)
    output = "".join(log.read_text() for log in logs)
    assert codes == [0, 0], output[-4000:]
    assert "started again (a node joined or left)" in output, output[-4000:]
    first, *_, last = json.loads((run_dir / "run.json").read_text())["segments"]
    assert first["world_size"] == 1 and last["world_size"] == 2
    assert last["from_step"] == 23, last
    assert sum(node["processes"] for node in last["nodes"]) == 2
    assert json.loads((run_dir / "summary.json").read_text())["global_step"] == STEPS
    assert_on_trajectory(train_losses(run_dir), one_process, last["from_step"])


def test_kill_tree_reaches_a_child_in_a_session_of_its_own(tmp_path):
    """The helper the cases rely on: a grandchild started with setsid dies too."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; "
         "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
         "start_new_session=True); print(p.pid, flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    child = int(parent.stdout.readline())
    kill_tree(parent)
    deadline = time.monotonic() + 60
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the setsid child outlived the kill"
        time.sleep(0.05)
    assert parent.returncode == -signal.SIGKILL
