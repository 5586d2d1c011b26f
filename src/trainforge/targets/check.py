"""`trainforge targets check NAME`: log in once and prove the target can take a run.

One probe script runs on the login node (one round trip over the shared connection): the
project folder, the setup line, Slurm's commands (sbatch, sinfo, squeue, sacct, scancel),
the remote trainforge and the partitions. The first thing missing is one line with its fix
(`UserError`, exit 2); otherwise the lines describe what was found.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainforge.errors import UserError
from trainforge.targets.remote import Remote, cd_line
from trainforge.targets.spec import Target

TOOLS = ("sbatch", "sinfo", "squeue", "sacct", "scancel")


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    state: str
    nodes: str
    time_limit: str

    def line(self) -> str:
        mark = " (default)" if self.default else ""
        return f"{self.name}{mark}: {self.state}, {self.nodes} nodes, time limit {self.time_limit}"


def _probe(target: Target) -> str:
    cd = ""
    if target.remote_dir:
        cd = f'{cd_line(target.remote_dir)} 2>/dev/null || {{ echo "tf-dir=missing"; exit 0; }}; '
    setup = ""
    if target.setup:
        # The setup line runs in this shell (it may `source` an environment); its first error
        # line is kept for the message.
        setup = (
            "tf_err=$(mktemp); { " + target.setup + ' ; } >/dev/null 2>"$tf_err"; '
            'echo "tf-setup=$? $(head -n 1 "$tf_err" | cut -c 1-200)"; rm -f "$tf_err"; '
        )
    tools = " ".join(TOOLS)
    return (
        f'{cd}echo "tf-dir=$(pwd)"; {setup}'
        f'for t in {tools}; do echo "tf-tool-$t=$(command -v $t)"; done; '
        'echo "tf-trainforge=$(trainforge --version 2>/dev/null | head -n 1)"; '
        'echo "tf-bin=$(dirname "$(command -v trainforge)" 2>/dev/null)"; '
        "echo \"tf-partitions=$(sinfo -h -o '%P|%a|%D|%l' 2>/dev/null | tr '\\n' ';')\""
    )


def _facts(text: str) -> dict[str, str]:
    facts = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith("tf-"):
            facts[key[3:]] = value.strip()
    return facts


def partitions(listing: str) -> list[Partition]:
    """sinfo's `%P|%a|%D|%l` lines (`;`-joined) as partitions; the default ends in `*`."""
    found = []
    for row in listing.split(";"):
        parts = row.strip().split("|")
        if len(parts) == 4 and parts[0]:
            name = parts[0].rstrip("*")
            found.append(Partition(name, parts[0].endswith("*"), *parts[1:]))
    return found


def check_target(target: Target) -> list[str]:
    """What the target offers, as lines to print; UserError at the first thing missing."""
    return probe_target(target)[0]


def probe_target(target: Target) -> tuple[list[str], dict[str, str]]:
    """(the lines `check_target` prints, what the probe found: `bin` is the folder of the
    remote trainforge after the setup line, which the batch script puts first on PATH)."""
    if target.kind == "local":
        return ["local: this machine; runs start here (trainforge train)"], {}
    remote = Remote(target)
    done = remote.run(_probe(target), raw=True, timeout=120)
    facts = _facts(done.out)
    where, name = target.where(), target.name
    if facts.get("dir") == "missing" or "dir" not in facts:
        raise UserError(
            f"target {name}: remote_dir {target.remote_dir} does not exist on {where}",
            "create it there (mkdir -p) or fix remote_dir in the targets file",
        )
    lines = [f"target {name}: {where}, project folder {facts['dir']}"]
    if target.setup:
        code, _, said = facts.get("setup", "1").partition(" ")
        if code != "0":
            raise UserError(
                f"target {name}: the setup line failed on {where} ({said or 'exit ' + code})",
                "fix `setup` in the targets file (it runs before every command there)",
            )
        lines.append(f"setup: {target.setup}")
    missing = [tool for tool in TOOLS if not facts.get(f"tool-{tool}")]
    if missing:
        raise UserError(
            f"target {name}: no {', '.join(missing)} on {where}: not a Slurm login node",
            "name a login node as host, or load Slurm in `setup` (e.g. module load slurm)",
        )
    lines.append("slurm: " + ", ".join(facts[f"tool-{tool}"] for tool in TOOLS))
    if not facts.get("trainforge"):
        raise UserError(
            f"target {name}: trainforge is not installed on {where} (in {facts['dir']})",
            "install it there (git clone ... && make venv) and activate it in `setup`, "
            "e.g. source ~/trainforge/.venv/bin/activate",
        )
    lines.append(f"remote: {facts['trainforge']}")
    found = partitions(facts.get("partitions", ""))
    names = [p.name for p in found]
    if target.partition and target.partition not in names:
        raise UserError(
            f"target {name}: partition {target.partition} does not exist on {where} "
            f"(there: {', '.join(names) or 'none'})",
            "set partition to one of those in the targets file",
        )
    lines += [f"partition {p.line()}" for p in found] or ["partitions: none listed by sinfo"]
    return lines, facts
