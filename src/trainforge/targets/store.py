"""The targets file: where it is, reading it (one line per problem, naming the file and the
key), and adding a target to it without losing what else it holds.

Format (`~/.config/trainforge/targets.yaml`, `$TRAINFORGE_TARGETS`, or `--targets FILE`):

    targets:
      hpc:
        host: login.cluster.example.org
        user: me
        remote_dir: ~/project
        partition: gpu
        setup: module load python/3.11 && source ~/project/.venv/bin/activate

`local` (this machine) is always there and cannot be redefined. The file holds no secret:
it is written with mode 0600 all the same, as ssh does with its own configuration.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainforge import yamltext
from trainforge.errors import UserError
from trainforge.targets.spec import LOCAL, SECRET_KEYS, Target

ENV = "TRAINFORGE_TARGETS"


def default_path(env: dict[str, str] | None = None) -> Path:
    """`$TRAINFORGE_TARGETS`, else `$XDG_CONFIG_HOME/trainforge/targets.yaml`, else
    `~/.config/trainforge/targets.yaml`."""
    env = os.environ if env is None else env
    if env.get(ENV):
        return Path(env[ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "trainforge" / "targets.yaml"


def _raw(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = yamltext.load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"targets file {path}: not readable YAML ({first})", "fix the file"
        ) from None
    entries = data.get("targets") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or set(data) - {"targets"}
        or not isinstance(entries, dict | None)
    ):
        raise UserError(
            f"targets file {path}: expected one mapping `targets:` of NAME: fields",
            "see docs/clusters.md for the format",
        )
    return entries or {}


def _problem(path: Path, name: str, fields: Any, err: ValidationError) -> UserError:
    first = err.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        if key.lower() in SECRET_KEYS:
            return UserError(
                f"targets file {path}: target {name}: `{key}` is refused, targets never store "
                "secrets",
                "remove it and reach the host with an SSH key (ssh-copy-id USER@HOST) or your "
                "agent",
            )
        close = difflib.get_close_matches(key, list(Target.model_fields), n=1, cutoff=0.6)
        hint = (
            f"did you mean `{close[0]}`?" if close else f"known: {', '.join(Target.model_fields)}"
        )
        return UserError(f"targets file {path}: target {name}: unknown key `{key}`", hint)
    given = fields.get(key) if isinstance(fields, dict) else None
    shown = f" = {str(given)[:60]!r}" if given is not None else ""
    return UserError(
        f"targets file {path}: target {name}: {key}{shown}: {first['msg']}", "fix that value"
    )


def load_targets(path: Path | None = None) -> dict[str, Target]:
    """Every target of the file, by name, with `local` first."""
    path = path or default_path()
    found: dict[str, Target] = {"local": LOCAL}
    for name, fields in _raw(path).items():
        if str(name) == "local":
            raise UserError(
                f"targets file {path}: `local` is this machine and cannot be redefined",
                "give the target another name",
            )
        if not isinstance(fields, dict):
            raise UserError(
                f"targets file {path}: target {name}: expected its fields", "e.g. host: NAME"
            )
        try:
            found[str(name)] = Target.model_validate({**fields, "name": str(name)})
        except ValidationError as err:
            raise _problem(path, str(name), fields, err) from None
    return found


def get_target(name: str, path: Path | None = None) -> Target:
    """The target called `name`; one line naming the known ones when there is none."""
    targets = load_targets(path)
    if name in targets:
        return targets[name]
    close = difflib.get_close_matches(name, list(targets), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UserError(
        f"unknown target {name!r} (known: {', '.join(targets)})",
        f"{hint}add it with: trainforge targets add {name} --host LOGIN_NODE",
    )


def add_target(target: Target, path: Path | None = None, replace: bool = False) -> Path:
    """Write `target` into the file (created with its folder when missing), keeping the other
    targets and their order; the file is replaced in one rename, so a crash leaves the old one."""
    path = path or default_path()
    if target.name == "local":
        raise UserError("`local` is this machine and cannot be redefined", "pick another name")
    entries = _raw(path)
    if target.name in entries and not replace:
        raise UserError(
            f"target {target.name} already exists in {path}",
            "pick another name, or pass --replace to overwrite it",
        )
    entries[target.name] = target.model_dump(exclude={"name"}, exclude_defaults=True, mode="json")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump({"targets": entries}, sort_keys=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".targets-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
