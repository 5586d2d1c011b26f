"""A real OpenSSH server on a loopback port, as a cluster's login node for the target tests.

Started as root with every file under one folder: its own host key, one authorized client key
the fixture writes, keys only (no password or keyboard-interactive login), `StrictModes no`
because pytest's temporary folders sit under the world-writable /tmp. The client trusts the
host key through a known_hosts file of its own, so `StrictHostKeyChecking` stays on.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class LoginNode:
    root: Path
    port: int
    key: Path  # the client's private key (authorized on the node)
    known_hosts: Path
    process: subprocess.Popen

    def target_fields(self, **more) -> dict:
        """The targets-file fields that reach this node with the fixture's key."""
        return {
            "host": "127.0.0.1",
            "user": "root",
            "port": self.port,
            "identity_file": str(self.key),
            "ssh_options": [f"UserKnownHostsFile={self.known_hosts}", "StrictHostKeyChecking=yes"],
            **more,
        }

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "trainforge-test", "-f", str(path)],
        check=True,
    )


def start_login_node(root: Path) -> LoginNode:
    assert Path(SSHD).is_file(), "sshd is missing: make venv installs openssh-server"
    root.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    host_key, key = root / "host_key", root / "id_ed25519"
    _keygen(host_key)
    _keygen(key)
    shutil.copy(key.with_suffix(".pub"), root / "authorized_keys")
    port = _free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {root}/sshd.pid\n"
        f"AuthorizedKeysFile {root}/authorized_keys\nPubkeyAuthentication yes\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nMaxStartups 50\nMaxSessions 50\n"
        "LogLevel ERROR\n",
        encoding="utf-8",
    )
    public = (host_key.with_suffix(".pub")).read_text(encoding="utf-8").split()
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n", encoding="utf-8")
    log = (root / "sshd.log").open("w")
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log, stdout=log)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, (root / "sshd.log").read_text()
            assert time.monotonic() < deadline, "sshd did not listen within 60 s"
            time.sleep(0.1)
    return LoginNode(root, port, key, known_hosts, process)
