"""The targets file: read with one line per problem, written without losing other targets,
and never a place for a secret."""

from __future__ import annotations

import stat

import pytest
import yaml
from tests.fakes.in_process import run_in_process

from trainforge.errors import UserError
from trainforge.targets import LOCAL, default_path, load_targets
from trainforge.targets.spec import Target
from trainforge.targets.store import add_target, get_target


def write(path, data) -> None:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


def test_local_is_always_there_and_the_file_adds_targets(tmp_path):
    path = tmp_path / "targets.yaml"
    assert load_targets(path) == {"local": LOCAL}  # no file yet
    write(path, {"targets": {"hpc": {"host": "login.example.org", "partition": "gpu"}}})
    found = load_targets(path)
    assert list(found) == ["local", "hpc"]
    assert found["hpc"].remote and found["hpc"].where() == "login.example.org"
    assert not Target(name="here").remote  # Slurm on this login node


def test_the_default_file_follows_the_environment(tmp_path):
    assert default_path({"TRAINFORGE_TARGETS": "/x/t.yaml"}).as_posix() == "/x/t.yaml"
    assert default_path({"XDG_CONFIG_HOME": "/cfg"}).as_posix() == "/cfg/trainforge/targets.yaml"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"hots": "x"}, "unknown key `hots`. did you mean `host`?"),
        (
            {"host": "x", "password": "hunter2"},
            "`password` is refused, targets never store secrets",
        ),
        (
            {"host": "x", "port": 70000},
            "port = '70000': Input should be less than or equal to 65535",
        ),
        ({"host": "x", "ssh_options": ["PasswordAuthentication=yes"]}, "never passwords"),
        ({"kind": "kubernetes"}, "kind = 'kubernetes'"),
    ],
)
def test_a_bad_target_is_one_line_naming_file_target_and_key(tmp_path, fields, says):
    path = tmp_path / "targets.yaml"
    write(path, {"targets": {"hpc": fields}})
    with pytest.raises(UserError) as err:
        load_targets(path)
    line = err.value.line()
    assert "\n" not in line and f"targets file {path}: target hpc" in line
    assert says in line
    assert "hunter2" not in line


def test_local_cannot_be_redefined_and_an_unknown_name_suggests(tmp_path):
    path = tmp_path / "targets.yaml"
    write(path, {"targets": {"local": {"host": "x"}}})
    with pytest.raises(UserError, match="cannot be redefined"):
        load_targets(path)
    write(path, {"targets": {"hpc": {"host": "x"}}})
    with pytest.raises(UserError) as err:
        get_target("hcp", path)
    assert "unknown target 'hcp' (known: local, hpc). did you mean hpc?" in err.value.line()


def test_add_keeps_the_others_refuses_a_taken_name_and_writes_a_private_file(tmp_path):
    path = tmp_path / "cfg" / "targets.yaml"
    add_target(Target(name="a", host="one"), path)
    add_target(Target(name="b", host="two", partition="gpu"), path)
    assert [t.host for t in load_targets(path).values()] == [None, "one", "two"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(UserError, match="already exists"):
        add_target(Target(name="a", host="three"), path)
    add_target(Target(name="a", host="three"), path, replace=True)
    assert load_targets(path)["a"].host == "three"
    assert list(load_targets(path)) == ["local", "a", "b"]
    assert not list(path.parent.glob(".targets-*"))  # no temporary file left


def test_the_cli_adds_lists_and_refuses_bad_input(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "t.yaml")
    code, out, err = run_in_process(
        monkeypatch, capsys, "targets", "add", "hpc", "--host", "login", "--user", "me",
        "--port", "2222", "--partition", "gpu", "--targets", path,
    )  # fmt: skip
    assert code == 0, err
    assert "target hpc (me@login:2222) saved in" in out
    code, out, err = run_in_process(monkeypatch, capsys, "targets", "list", "--targets", path)
    assert code == 0 and "hpc" in out and "me@login:2222, partition gpu" in out
    code, out, err = run_in_process(
        monkeypatch, capsys, "targets", "add", "bad name", "--host", "x", "--targets", path
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--name" in err
    code, out, err = run_in_process(
        monkeypatch, capsys, "targets", "check", "nope", "--targets", path
    )
    assert code == 2
    assert err.strip().splitlines() == [
        "unknown target 'nope' (known: local, hpc). add it with: trainforge targets add nope "
        "--host LOGIN_NODE"
    ]
