"""YAML a user wrote, with anchors and aliases: a config's repeated parts still load, and a
document whose aliases stand for millions of values (the "billion laughs" document) is
refused in one line wherever a user's YAML comes in: a config file, `--set`, a schema flag,
the web app's override box, a sweep's space file."""

from __future__ import annotations

import pytest
import yaml

from fakes.in_process import run_main
from trainforge import yamltext
from trainforge.config.loading import parse_set_flag
from trainforge.errors import UserError


def bomb(levels: int = 9) -> str:
    """A flow-style list whose nested aliases stand for 9**levels strings."""
    parts = ["&l0 [x, x, x, x, x, x, x, x, x]"]
    parts += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def test_anchors_a_config_uses_load_as_plain_yaml_does():
    text = "base: &base {lr: 0.1, steps: [1, 2]}\nrun: {<<: *base, steps: [3]}\nagain: *base\n"
    assert yamltext.load(text) == yaml.safe_load(text)


def test_a_value_of_many_aliases_is_refused_before_it_is_built():
    with pytest.raises(yamltext.ExpansionRefused) as info:
        yamltext.load(bomb())
    assert "more than 100,000 values" in info.value.problem
    assert info.value.problem_mark is not None  # readers report the line and column
    # the same shape below the bound loads (9**5 = 59,049 strings)
    assert len(yamltext.load(bomb(5))) == 5


def test_an_anchor_that_contains_itself_is_refused():
    with pytest.raises(yamltext.ExpansionRefused, match="alias of itself"):
        yamltext.load("a: &a [1, *a]\n")


def test_set_refuses_a_bomb_in_one_line_naming_the_flag():
    with pytest.raises(UserError) as info:
        parse_set_flag(f"data.options={bomb()}")
    assert info.value.line().startswith("--set data.options: its aliases stand for more than")
    assert "\n" not in info.value.line()
    # text that is no YAML still stays text
    assert parse_set_flag("model.name=a: b: c") == ("model.name", "a: b: c")


def test_web_override_box_answers_a_bomb_with_its_line(tmp_path):
    from trainforge.web.paths import override_problem
    from trainforge.web.settings import WebSettings

    problem = override_problem(WebSettings(root=tmp_path), f"data.options={bomb()}", "set")
    assert problem is not None and "aliases stand for more than" in problem


@pytest.mark.timeout(300)
def test_command_line_refuses_a_bomb_with_exit_2(tmp_path):
    # Before the bound this command ran for hours: the timeout is the test's proof, not a
    # measure of speed (it answers in well under a second).
    result = run_main("config", "show", "config/vit_digits.yaml", "--set", f"data.options={bomb()}")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "aliases stand for more than 100,000 values" in lines[0], lines


def test_a_sweep_space_file_with_a_bomb_is_refused(tmp_path):
    from trainforge.sweep.space import read_space

    path = tmp_path / "space.yaml"
    path.write_text(f"optimizer.learning_rate: {bomb()}\n")
    with pytest.raises(UserError, match="aliases stand for more than"):
        read_space(path)
