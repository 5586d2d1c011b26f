"""The packaged recipes: the run configs trainforge ships and the small data sets they name,
as package data, so `trainforge train vit_digits` works after `pip install` in any folder.

What this package owns:
- the one list of recipes, `recipes.yaml` beside this module (what each trains, its data, a
  typical time), read by `trainforge recipes`, the web app's Train Model dialog and the
  table in docs/install.md;
- where a recipe's files are: `config/NAME.yaml` and `example_datasets/...` under this
  folder, laid out as in the clone, whose `config/` and `example_datasets/` are links to
  these (one copy of each recipe);
- what a config argument names: a file, else a recipe by name, else one line with the
  nearest recipe name (`locate`);
- where a packaged recipe's relative data paths lead: to the folder the user runs in when
  it has them (the clone, a copy), else to the package's copy (`anchor`);
- `trainforge recipes copy`: the config and the data files it names, written for editing,
  never over a file without `force`.

The folder is read through `importlib.resources`, as a directory: a wheel and an editable
install both unpack it (a zip import is not supported, as torch is never imported from one).
torchtune's packaged recipes (`tune ls`, `tune cp`) and Ultralytics' packaged cfg
(`yolo copy-cfg`) are the models; neither is a library that could serve this.
"""

from __future__ import annotations

import difflib
import functools
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainforge import yamltext
from trainforge.errors import UserError

ROOT = Path(str(resources.files(__name__)))
CONFIG_DIR = ROOT / "config"
INDEX = ROOT / "recipes.yaml"
SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Recipe:
    """One packaged run config and what `trainforge recipes` says about it."""

    name: str  # the config file's stem: `trainforge train NAME`
    file: Path  # the packaged config file
    trains: str  # what the run trains
    data: str  # the data set it reads, and whether it is packaged or downloaded
    time: str  # a typical run, with where that was measured

    @property
    def data_files(self) -> tuple[str, ...]:
        """The packaged files the config names, as it names them (relative to `ROOT`)."""
        return tuple(dict.fromkeys(packaged_paths(read(self.file))))


@functools.cache
def catalog() -> tuple[Recipe, ...]:
    """Every packaged recipe, in the order of `recipes.yaml`."""
    index = yaml.safe_load(INDEX.read_text(encoding="utf-8")) or {}
    files = {p.stem: p for p in CONFIG_DIR.iterdir() if p.suffix in SUFFIXES}
    return tuple(
        Recipe(name, files[name], entry["trains"], entry["data"], entry["time"])
        for name, entry in index.items()
        if name in files  # a test holds the index and the folder to the same names
    )


def names() -> list[str]:
    return [recipe.name for recipe in catalog()]


def get(name: str) -> Recipe | None:
    return next((recipe for recipe in catalog() if recipe.name == name), None)


def find(name: str) -> Recipe:
    """The recipe called `name`, or one line with the nearest name."""
    recipe = get(name)
    if recipe is None:
        raise UserError(f"no recipe {name!r}", _nearest(name))
    return recipe


def _nearest(name: str) -> str:
    close = difflib.get_close_matches(name, names(), n=1)
    listing = "`trainforge recipes` lists them"
    return f"did you mean {close[0]}? ({listing})" if close else f"{listing}: {', '.join(names())}"


def recipe_of(path: Path) -> Recipe | None:
    """The packaged recipe a config file is (through the clone's `config/` link too)."""
    resolved = path.resolve()
    return next((r for r in catalog() if r.file.resolve() == resolved), None)


def locate(path: Path) -> tuple[Path, Recipe | None]:
    """(the config file `path` names, the recipe when it was named by its name). A path
    that exists is itself; a bare name (no folder, no suffix) that is no file is a recipe;
    anything else is one line: the path not found, with the nearest recipe name."""
    bare = len(path.parts) == 1 and not path.suffix
    recipe = get(str(path)) if bare else None
    if path.exists() and not (recipe is not None and path.is_dir()):
        return path, None
    if recipe is not None:
        return recipe.file, recipe
    if bare:
        raise UserError(
            f"{path}: no such config file and no recipe of that name", _nearest(path.name)
        )
    if get(path.stem) is not None:  # `config/vit_digits.yaml` outside the clone
        raise UserError(
            f"config file {path} not found",
            f"the packaged recipe is `trainforge train {path.stem}` "
            f"(or copy it here: trainforge recipes copy {path.stem})",
        )
    raise UserError(f"config file {path} not found", "check the path")


def read(file: Path) -> dict[str, Any]:
    """A packaged config's data (the files are trainforge's own: no user errors expected)."""
    text = file.read_text(encoding="utf-8")
    return json.loads(text) if file.suffix == ".json" else yamltext.load(text) or {}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _is_packaged(text: str) -> bool:
    # A path with a folder in it: names such as `cosine` or `auto` never lead to a file here.
    path = Path(text)
    return (
        "/" in text and not path.is_absolute() and ".." not in path.parts and (ROOT / path).exists()
    )


def packaged_paths(data: dict[str, Any]) -> list[str]:
    """The values of a config that name files packaged under `ROOT` (its data sets)."""
    return [text for text in _strings(data) if _is_packaged(text)]


def anchor(data: dict[str, Any], file: Path | None) -> dict[str, Any]:
    """A packaged recipe's data with each relative path to packaged data that the current
    folder lacks made absolute, to the package's copy: from an empty folder the recipe
    reads what pip installed, while the clone (or a `recipes copy`) reads its own files.
    Any other config's data is returned as it is."""
    if file is None or recipe_of(file) is None:
        return data

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: fix(item) for key, item in value.items()}
        if isinstance(value, list):
            return [fix(item) for item in value]
        if isinstance(value, str) and _is_packaged(value) and not Path(value).exists():
            return str(ROOT / value)
        return value

    return fix(data)


def copy(recipe: Recipe, folder: Path, *, force: bool = False) -> list[Path]:
    """Write the recipe's config and the data files it names into `folder` (the data under
    the same relative paths, so the copy trains from `folder` as written); the files
    written. Nothing is written when one of them exists, unless `force`."""
    targets = {recipe.file: folder / recipe.file.name}
    targets |= {ROOT / rel: folder / rel for rel in recipe.data_files}
    taken = [str(dest) for dest in targets.values() if dest.exists()]
    if taken and not force:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise UserError(
            f"{taken[0]} already exists{more}",
            f"pass --force to overwrite, or copy elsewhere: trainforge recipes copy "
            f"{recipe.name} DIR",
        )
    for source, dest in targets.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, dest)
    return list(targets.values())


def listing() -> list[str]:
    """`trainforge recipes`: one line per recipe (name, what it trains, data, typical time)."""
    rows = [(r.name, r.trains, r.data, r.time) for r in catalog()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return ["  ".join([*(t.ljust(w) for t, w in zip(row, widths, strict=False)), row[3]])
            for row in rows]  # fmt: skip


def train_command(recipe: Recipe, folder: Path) -> str:
    """How to train a copy written into `folder`: its data paths are relative to the folder
    the run starts in, so a copy with data trains from `folder`."""
    if folder.resolve() == Path.cwd().resolve():
        return f"trainforge train {recipe.file.name}"
    if recipe.data_files:
        return f"cd {folder} && trainforge train {recipe.file.name}"
    return f"trainforge train {folder / recipe.file.name}"


# The table README.md and docs/install.md show, between these lines (`python -m
# trainforge.recipes` rewrites it there; a test fails when a page's copy is stale).
TABLE_START = "<!-- the recipes table: generated by `python -m trainforge.recipes` -->"
TABLE_END = "<!-- end of the recipes table -->"


def markdown_table() -> str:
    rows = ["| recipe | trains | data | typical time |", "|---|---|---|---|"]
    rows += [f"| `{r.name}` | {r.trains} | {r.data} | {r.time} |" for r in catalog()]
    return "\n".join([TABLE_START, *rows, TABLE_END])


def with_table(page: str) -> str:
    """The page's text with its recipes table (between the two marker lines) regenerated."""
    start, end = page.index(TABLE_START), page.index(TABLE_END) + len(TABLE_END)
    return page[:start] + markdown_table() + page[end:]
