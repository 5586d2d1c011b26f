"""From the cluster to the edge, as one run: two "nodes" (Linux network namespaces joined by
a veth pair, one torchrun agent in each, c10d rendezvous on the first node's address) train
the digits ViT on digits 0-5 (an image folder) in a shared run folder; SIGTERM on both nodes
stops it with a checkpoint; one process with micro-batch cap 8 (an edge box) finishes it;
its weights then start a run on a new task (digits 6-9, four classes).

Needs root for `ip netns` (CI runs as root); the fixture removes what it made.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.parallel.test_ddp import REPO, TINY

PORT = 29731


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def two_nodes():
    """Two namespaces tf<pid>a/b with veth ends 10.231.0.1 and 10.231.0.2; removed after."""
    if os.geteuid() != 0:
        pytest.fail("the two-node test needs root for ip netns (CI runs as root)")
    tag = f"tf{os.getpid() % 100000}"
    names = [f"{tag}a", f"{tag}b"]
    links = [f"{tag}x", f"{tag}y"]
    try:
        for name in names:
            ip("netns", "add", name)
            ip("-n", name, "link", "set", "lo", "up")
        ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for number, (name, link) in enumerate(zip(names, links, strict=True), start=1):
            ip("link", "set", link, "netns", name)
            ip("-n", name, "addr", "add", f"10.231.0.{number}/24", "dev", link)
            ip("-n", name, "link", "set", link, "up")
        yield list(zip(names, links, strict=True))
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def agent(node: tuple[str, str], rank: int, args: list[str], log: Path) -> subprocess.Popen:
    name, link = node
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
        f"--node-rank={rank}", "--rdzv-backend=c10d", f"--rdzv-endpoint=10.231.0.1:{PORT}",
        # The host name resolves outside the namespaces: the addresses are said outright.
        f"--local-addr=10.231.0.{rank + 1}", f"--rdzv-conf=is_host={int(rank == 0)}",
        "--rdzv-id=two-nodes", "-m", "trainforge", "train", *args,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=link)
    return subprocess.Popen(
        ["ip", "netns", "exec", name, *torchrun], cwd=REPO, env=env,
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def wait_for_step(metrics: Path, step: int, agents: list[subprocess.Popen], deadline_s: float):
    """Wait (event, not time: the deadline only ends a hang) for a logged train step."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if metrics.is_file():
            for line in metrics.read_text().splitlines():
                record = json.loads(line)
                if record.get("split") == "train" and record["step"] >= step:
                    return
        assert all(a.poll() is None for a in agents), "an agent ended before training"
        time.sleep(0.5)
    pytest.fail(f"no train record at step {step} in {deadline_s:.0f} s")


def write_digits(root: Path, labels: range) -> Path:
    """scikit-learn's digits of `labels` as an image folder of PNG files, one per class."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    for number, (pixels, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        if label in labels:
            folder = root / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((pixels * 255 / 16).astype("uint8")).save(folder / f"{number}.png")
    return root


@pytest.mark.dist
def test_cluster_to_edge_one_run(two_nodes, tmp_path):
    run_dir = tmp_path / "cluster"
    digits_0_5 = write_digits(tmp_path / "digits-0-5", range(6))
    sets = [*TINY, f"output.dir={tmp_path}", "output.run_name=cluster",
            "data.dataset=image-folder", f"data.root={digits_0_5}", "data.image_size=8",
            "training.per_device_train_batch_size=64", "training.max_steps=100000",
            "logging.logging_steps=2"]  # fmt: skip
    args = [str(REPO / "config/vit_digits.yaml"), *(a for s in sets for a in ("--set", s))]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    agents = [agent(node, rank, args, logs[rank]) for rank, node in enumerate(two_nodes)]
    try:
        wait_for_step(run_dir / "metrics.jsonl", 6, agents, deadline_s=600)
        for process in agents:
            os.killpg(process.pid, signal.SIGTERM)  # Slurm's preemption signal, on each node
        codes = [process.wait(timeout=300) for process in agents]
    finally:
        for process in agents:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    output = logs[0].read_text()
    assert "32 x 1 accumulation x 2 processes = 64" in output, output[-3000:]
    assert "checkpoint_interrupted" in output, output[-3000:]
    assert all(code != 0 for code in codes)  # stopped, not finished
    meta = json.loads((run_dir / "checkpoints/checkpoint_interrupted/meta.json").read_text())
    stopped_at = meta["global_step"]
    assert meta["setup"]["world_size"] == 2 and stopped_at >= 6

    # The edge box: one process, micro-batch at most 8.
    edge = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "--resume", str(run_dir),
         "--max_steps", str(stopped_at + 4), "--set", "hardware.micro_batch_size=8"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert edge.returncode == 0, edge.stdout[-3000:] + edge.stderr[-3000:]
    assert "continued: world size 2 -> 1: sums reduce in another order" in edge.stdout
    assert "8 x 8 accumulation" in edge.stdout
    assert json.loads((run_dir / "summary.json").read_text())["global_step"] == stopped_at + 4
    history = json.loads((run_dir / "run.json").read_text())["segments"]
    assert [(s["world_size"], s["micro_batch"]) for s in history] == [(2, 32), (1, 8)]

    # Its weights start a run on a new task: digits 6-9, four classes.
    folder = write_digits(tmp_path / "digits-6-9", range(6, 10))
    adapt = [*TINY, f"output.dir={tmp_path}", "output.run_name=adapted",
             "data.dataset=image-folder", f"data.root={folder}", "data.image_size=8",
             "training.max_steps=4"]  # fmt: skip
    adapted = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml"),
         *(a for s in adapt for a in ("--set", s)), "--init_from", str(run_dir)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert adapted.returncode == 0, adapted.stdout[-3000:] + adapted.stderr[-3000:]
    assert "head 6 -> 4 classes, re-initialised" in adapted.stdout
    record = json.loads((tmp_path / "adapted" / "run.json").read_text())
    assert str(run_dir) in json.dumps(record)
