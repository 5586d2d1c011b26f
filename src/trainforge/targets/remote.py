"""Running a shell line on a target: here for a local Slurm target, over SSH for a remote one.

SSH is the user's own OpenSSH client (`ssh`), not a Python library. Considered: Paramiko,
AsyncSSH and Fabric. OpenSSH was chosen because HPC sites document access in its terms and
users already have it set up: `~/.ssh/config` aliases, ProxyJump through a bastion, the
agent, certificates, hardware keys and GSSAPI all work unchanged, and rsync copies over the
same transport. Connections are shared (ControlMaster, kept `CONTROL_PERSIST_S` after the
last use), so a poller asks squeue over one open connection instead of logging in again.
`BatchMode=yes`: ssh never prompts, so a missing key is one line with the fix, never a
password prompt in a server or a hung web page; no password is stored anywhere.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainforge.errors import UserError
from trainforge.targets.spec import Target

CONTROL_PERSIST_S = 120
CONNECT_TIMEOUT_S = 15
SOCKET_PATH_MAX = 100  # a unix socket path longer than ~104 bytes cannot be bound

# What ssh prints (exit 255) -> (what it means, the fix).
_UNREACHABLE = (
    "Could not resolve hostname",
    "Connection refused",
    "Connection timed out",
    "Operation timed out",
    "No route to host",
    "Network is unreachable",
    "Connection closed by",
    "Connection reset",
    "kex_exchange_identification",
)


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def control_dir() -> Path:
    """A private folder for the shared connections' sockets: the runtime or cache folder,
    or a per-user folder in the temporary directory when that path would be too long."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "trainforge-ssh" if runtime else Path.home() / ".cache/trainforge/ssh"
    if len(str(base)) + 42 > SOCKET_PATH_MAX:  # %C is 40 hex characters
        base = Path(tempfile.gettempdir()) / f"trainforge-ssh-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    if base.stat().st_uid != os.getuid():
        raise UserError(
            f"{base} belongs to another user", "set XDG_RUNTIME_DIR to a folder of yours"
        )
    base.chmod(0o700)
    return base


def cd_line(folder: str) -> str:
    """`cd FOLDER` for the remote shell: `~/x` stays expandable there, anything else quoted."""
    where = folder if folder.startswith("~") and " " not in folder else shlex.quote(folder)
    return f"cd {where}"


class Remote:
    """Shell lines on one target: `run(line)`; for SSH targets also the `ssh` words that
    rsync's `-e` takes (`ssh_words`)."""

    def __init__(self, target: Target) -> None:
        if target.kind != "slurm":
            raise UserError(f"target {target.name} is this machine", "run the command here")
        self.target = target

    def ssh_words(self) -> list[str]:
        """`ssh` with the target's options, without the destination."""
        t = self.target
        words = [
            "ssh",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={control_dir()}/%C",
            "-o", f"ControlPersist={CONTROL_PERSIST_S}",
        ]  # fmt: skip
        if t.port:
            words += ["-p", str(t.port)]
        if t.user:
            words += ["-l", t.user]
        if t.identity_file:
            words += ["-i", str(Path(t.identity_file).expanduser()), "-o", "IdentitiesOnly=yes"]
        for option in t.ssh_options:
            words += ["-o", option]
        return words

    def script(self, line: str, *, setup: bool = True) -> str:
        """`line` as the target runs it: in its project folder, after its setup line."""
        parts = []
        if self.target.remote_dir:
            parts.append(cd_line(self.target.remote_dir))
        if setup and self.target.setup:
            parts.append(f"{{ {self.target.setup} ; }}")
        parts.append(line)
        return " && ".join(parts)

    def run(
        self,
        line: str,
        *,
        timeout: float = 60,
        setup: bool = True,
        raw: bool = False,
        stdin: str | None = None,
    ) -> Result:
        """Run `line` in a login shell on the target (`bash -lc`, so site profiles define
        `module`), with `stdin` as its input. Connection failures are one UserError line;
        `raw` runs `line` as given."""
        shell = line if raw else self.script(line, setup=setup)
        argv = ["bash", "-lc", shell]
        if self.target.remote:
            argv = [*self.ssh_words(), "--", self.target.host or "", shlex.join(argv)]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                input=stdin,
                stdin=subprocess.DEVNULL if stdin is None else None,
            )
        except subprocess.TimeoutExpired:
            raise UserError(
                f"target {self.target.name}: {self.target.where()} did not answer in "
                f"{timeout:.0f} s",
                "check that the host is up and reachable (ssh to it by hand), then try again",
            ) from None
        except FileNotFoundError:
            raise UserError(
                "ssh is not installed", "install OpenSSH's client (openssh-client)"
            ) from None
        if self.target.remote and done.returncode == 255:
            raise self.connection_error(done.stderr)
        return Result(done.returncode, done.stdout, done.stderr)

    def rsync_destination(self, folder: str = "") -> str:
        """`host:path` for rsync: a path relative to the login directory stays relative (rsync
        does not expand `~` on the far side)."""
        base = (self.target.remote_dir or "").removeprefix("~/").removeprefix("~")
        path = "/".join(p.strip("/") for p in (base, folder) if p.strip("/"))
        if (self.target.remote_dir or "").startswith("/"):
            path = "/" + path
        if not self.target.remote:
            return path or "."
        return f"{self.target.host}:{path}"

    def rsync(self, args: list[str], *, timeout: float = 600) -> Result:
        """rsync over the target's ssh (the shared connection), or locally for a login node."""
        argv = ["rsync", "-a", *args]
        if self.target.remote:
            argv[2:2] = ["-e", shlex.join(self.ssh_words())]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise UserError(
                "rsync is not installed", "install it (apt-get install rsync)"
            ) from None
        except subprocess.TimeoutExpired:
            raise UserError(
                f"target {self.target.name}: the copy did not finish in {timeout:.0f} s",
                "check the connection, then try again",
            ) from None
        if self.target.remote and done.returncode == 255:
            raise self.connection_error(done.stderr)
        return Result(done.returncode, done.stdout, done.stderr)

    def connection_error(self, stderr: str) -> UserError:
        """The one line for an ssh that could not log in, from what ssh printed."""
        t = self.target
        lines = [x.strip() for x in stderr.strip().splitlines() if x.strip()]
        said = lines[-1] if lines else "ssh exited with 255"
        dest = f"{t.user or '$USER'}@{t.host}"
        port = f" -p {t.port}" if t.port else ""
        if "Permission denied" in stderr:
            return UserError(
                f"target {t.name}: {t.where()} refused the key ({said})",
                f"install your public key there (ssh-copy-id{port} {dest}) or load it into your "
                "agent (ssh-add); trainforge never asks for or stores passwords",
            )
        if "Host key verification failed" in stderr or "REMOTE HOST IDENTIFICATION" in stderr:
            return UserError(
                f"target {t.name}: the host key of {t.where()} is unknown or changed",
                f"log in once by hand (ssh{port} {dest}) and check the key it shows",
            )
        if any(marker in stderr for marker in _UNREACHABLE):
            return UserError(
                f"target {t.name}: cannot reach {t.where()} ({said})",
                "check host and port in the targets file (trainforge targets list), your VPN, "
                "and that the login node is up",
            )
        return UserError(
            f"target {t.name}: ssh to {t.where()} failed ({said})", f"try ssh{port} {dest}"
        )
