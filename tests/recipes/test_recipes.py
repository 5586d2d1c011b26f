"""The packaged recipes (`trainforge.recipes`): one list, one copy, a name that works from any
folder, `recipes copy` for editing, and one line for a name that is neither file nor recipe.

Everything runs in this process (`run_main`) with tiny models and a few steps; the wheel as a
user installs it is tests/test_installed_wheel.py (slow).
"""

from __future__ import annotations

import filecmp
import json
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from fakes.in_process import run_main
from fakes.runs import QUIET, TINY_VIT
from trainforge import recipes
from trainforge.config import validate
from trainforge.hardware import detect

REPO = Path(__file__).resolve().parents[2]
# A quiet, tiny digits run of two steps (`--set` words).
TINY_DIGITS = [
    word
    for key, value in {**QUIET, **TINY_VIT, "training.num_threads": 1}.items()
    for word in ("--set", f"{key}={value}")
]


def test_the_list_and_the_config_folder_name_the_same_recipes():
    listed = list(yaml.safe_load(recipes.INDEX.read_text()))
    files = sorted(p.stem for p in recipes.CONFIG_DIR.iterdir() if p.suffix in recipes.SUFFIXES)
    assert sorted(listed) == files
    assert recipes.names() == listed  # every entry has its file: none dropped
    for recipe in recipes.catalog():
        assert recipe.trains and recipe.data and recipe.time, recipe


def test_the_clones_config_and_example_datasets_are_the_packaged_copy():
    """One copy: the clone's folders lead to the package's, file for file."""
    for name in ("config", "example_datasets"):
        clone, packaged = REPO / name, recipes.ROOT / name
        assert clone.resolve() == packaged.resolve(), f"{name}/ must link to {packaged}"
        compared = filecmp.dircmp(clone, packaged)
        assert not (compared.left_only or compared.right_only or compared.diff_files)
    assert {p.stem for p in (REPO / "config").iterdir()} == set(recipes.names())


def test_the_docs_tables_are_the_list():
    for page in ("README.md", "docs/install.md"):
        text = (REPO / page).read_text(encoding="utf-8")
        assert recipes.with_table(text) == text, f"{page}: run python -m trainforge.recipes"


@pytest.mark.parametrize("name", recipes.names())
def test_every_packaged_recipe_validates_from_an_empty_folder(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    resolved = validate(Path(name), platform=detect(), for_profile=True)
    assert resolved.recipe == name and resolved.path == recipes.get(name).file
    for path in recipes.get(name).data_files:  # the package's data, since this folder has none
        assert str(recipes.ROOT / path) in json.dumps(resolved.layers["file"])


def test_recipes_lists_one_line_per_recipe():
    result = run_main("recipes")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == recipes.names()
    digits = lines[recipes.names().index("vit_digits")]
    assert "digits" in digits and "2-core CPU" in digits


def test_train_by_name_in_an_empty_folder_says_which_recipe(tmp_path):
    result = run_main("train", "vit_digits", "--max_steps", "2", *TINY_DIGITS, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    header = [line for line in result.stdout.splitlines() if line.startswith("config: ")]
    assert header == [
        f"config: recipe vit_digits, packaged with trainforge ({recipes.get('vit_digits').file}); "
        "a copy to edit: trainforge recipes copy vit_digits"
    ]
    assert (tmp_path / "runs" / "vit_digits" / "model.safetensors").is_file()  # ./runs/ here


def test_copy_then_train_the_copy_on_its_own_data(tmp_path):
    result = run_main("recipes", "copy", "g2p_cmudict", "mine", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "train it with: cd mine && trainforge train g2p_cmudict.yaml" in result.stdout
    copy = tmp_path / "mine"
    assert (copy / "g2p_cmudict.yaml").read_bytes() == recipes.get("g2p_cmudict").file.read_bytes()
    for path in recipes.get("g2p_cmudict").data_files:
        assert filecmp.cmp(copy / path, recipes.ROOT / path, shallow=False), path
    # The copy is the user's to edit: a few words, so its run is quick and reads its own data.
    for split in ("train", "val", "test"):
        tsv = copy / "example_datasets" / "g2p" / f"cmudict_{split}.tsv"
        tsv.write_text("".join(tsv.read_text().splitlines(True)[:16]))
    result = run_main(
        "train", "g2p_cmudict.yaml", "--max_steps", "2", "--per_device_train_batch_size", "8",
        "--per_device_eval_batch_size", "8", "--set", "model.init_size=tiny",
        "--set", "task.max_new_tokens=4", "--set", "training.num_threads=1",
        *(w for key, value in QUIET.items() for w in ("--set", f"{key}={value}")),
        cwd=copy,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "train: 16 records" in result.stdout  # the copy's data, not the package's
    assert "config: recipe" not in result.stdout  # a file of the user's, no recipe by name
    assert (copy / "runs" / "g2p_cmudict").is_dir()


def test_copy_never_overwrites_without_force(tmp_path):
    assert run_main("recipes", "copy", "vit_digits", cwd=tmp_path).returncode == 0
    mine = tmp_path / "vit_digits.yaml"
    mine.write_text("# edited\n")
    again = run_main("recipes", "copy", "vit_digits", cwd=tmp_path)
    assert again.returncode == 2 and mine.read_text() == "# edited\n"
    assert again.stderr.splitlines() == [
        "vit_digits.yaml already exists. pass --force to overwrite, or copy elsewhere: "
        "trainforge recipes copy vit_digits DIR"
    ]
    forced = run_main("recipes", "copy", "vit_digits", "--force", cwd=tmp_path)
    assert (
        forced.returncode == 0 and mine.read_bytes() == recipes.get("vit_digits").file.read_bytes()
    )


@pytest.mark.parametrize(
    ("words", "line"),
    [
        (["train", "vit_digit"], "vit_digit: no such config file and no recipe of that name. "
         "did you mean vit_digits? (`trainforge recipes` lists them)"),
        (["validate", "g2p_cmudic"], "g2p_cmudic: no such config file and no recipe of that "
         "name. did you mean g2p_cmudict? (`trainforge recipes` lists them)"),
        (["train", "config/vit_digits.yaml"], "config file config/vit_digits.yaml not found. "
         "the packaged recipe is `trainforge train vit_digits` (or copy it here: trainforge "
         "recipes copy vit_digits)"),
        (["recipes", "copy", "vit_digit"], "no recipe 'vit_digit'. did you mean vit_digits? "
         "(`trainforge recipes` lists them)"),
    ],
)  # fmt: skip
def test_a_name_that_is_neither_file_nor_recipe_is_one_line(words, line, tmp_path):
    result = run_main(*words, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [line]
    assert not list(tmp_path.iterdir())  # nothing written


def test_version_is_the_package_metadata():
    result = run_main("--version")
    assert result.stdout == f"trainforge {metadata.version('trainforge')}\n"
