"""One target: the fields a user writes for it, validated like the run config (typed, frozen,
unknown keys refused with the nearest name). A password field is refused on purpose: a target
reaches its host with the user's SSH keys and agent, never with a stored secret."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Keys that would hold a secret: refused with the way SSH does without one.
SECRET_KEYS = ("password", "passphrase", "secret", "token")


class Target(BaseModel):
    """A place where runs execute. `kind: local` is this machine; `kind: slurm` submits
    with sbatch, on this machine when `host` is empty (a login node), else over SSH."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="What --target NAME and the web app call it.")
    kind: Literal["local", "slurm"] = Field("slurm", description="local, or slurm (sbatch).")
    host: str | None = Field(
        None, description="The login node (a name or an alias of your ~/.ssh/config); empty: here."
    )
    user: str | None = Field(None, description="The SSH user (default: your ssh config's).")
    port: int | None = Field(None, ge=1, le=65535, description="The SSH port (default: 22).")
    identity_file: str | None = Field(
        None, description="A private key file for ssh -i (default: your ssh config and agent)."
    )
    ssh_options: tuple[str, ...] = Field(
        (), description="More `ssh -o` options, e.g. ProxyJump=bastion (KEY=VALUE each)."
    )
    remote_dir: str | None = Field(
        None,
        description="The project folder on the cluster: configs are copied there and its runs/ "
        "holds the run folders (default: the login directory).",
    )
    partition: str | None = Field(None, description="sbatch --partition.")
    account: str | None = Field(None, description="sbatch --account.")
    qos: str | None = Field(None, description="sbatch --qos.")
    setup: str | None = Field(
        None,
        description="A shell line run before trainforge on the cluster, e.g. `module load "
        "python/3.11 && source venv/bin/activate`.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError(
                "letters, digits, '.', '_' and '-' only, starting with a letter or digit"
            )
        return value

    @field_validator("ssh_options")
    @classmethod
    def _options(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for option in value:
            key = option.split("=", 1)[0].strip()
            if "=" not in option or not key.isalnum():
                raise ValueError(f"{option!r} is not KEY=VALUE")
            if key.lower() in ("passwordauthentication", "kbdinteractiveauthentication"):
                raise ValueError(f"{key}: targets use keys and agents, never passwords")
        return value

    @property
    def remote(self) -> bool:
        """Reached over SSH (a host is named)."""
        return self.kind == "slurm" and bool(self.host)

    def where(self) -> str:
        """`user@host:port`, `this machine (Slurm)` or `this machine`: for one-line messages."""
        if self.kind == "local":
            return "this machine"
        if not self.host:
            return "this machine (Slurm)"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


LOCAL = Target(name="local", kind="local")
