"""The package line, file circles, run-folder names and function size, read with `ast`.

Packages: the first name under `trainforge` (`config`, `engine`, ...); a top-level module
(`cli.py`, `train.py`, `runfolder.py`, ...) is a package of its own. Every `import` and
`from` statement counts, at module level and inside functions (a function-level import is
still a dependency, only a later one), `TYPE_CHECKING` blocks included. The graph of
packages must have no cycle: a failure lists each cycle's edges with file:line.

Files: inside one package, the modules import each other without a circle (the same scan,
per file; a package's `__init__` re-exporting its modules is left out).

Run-folder names: the file names a run folder holds (`run.json`, `best_model`,
`checkpoint-N`, ...) are spelled only in `runfolder.py` and `engine/checkpoint.py`;
everything else names them through a `RunFolder` property or a checkpoint-module function.

The Trainer module: at most 350 lines as the formatter lays it out with every `# fmt: skip`
taken away (packed lines do not count as short).

Registries: every one refuses a taken name unless told to replace it.

Functions: none over 60 lines (from `def` to its last line) unless its docstring says why
in a line that contains "over 60 lines", e.g. "Over 60 lines: the flag list is the
signature."
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "trainforge"
MAX_FUNCTION_LINES = 60
REASON = "over 60 lines"


def _modules() -> list[tuple[Path, str]]:
    """(file, dotted module name) for every module under src/trainforge."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((path, ".".join(parts)))
    return out


def _package(module: str) -> str | None:
    """The node a dotted module belongs to: `trainforge.engine.trainer` -> engine,
    `trainforge.train` -> train; None outside trainforge or for `trainforge` itself."""
    parts = module.split(".")
    if parts[0] != "trainforge" or len(parts) < 2:
        return None
    return parts[1]


def _is_module(name: str) -> bool:
    return (ROOT / name).is_dir() or (ROOT / f"{name}.py").is_file()


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted modules an import statement reads (for `from trainforge import x`, the
    module trainforge.x where x is one, else trainforge itself)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        anchor = here[: len(here) - (node.level - 1)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    if base == "trainforge":
        return [f"trainforge.{a.name}" if _is_module(a.name) else "trainforge" for a in node.names]
    return [base]


def package_edges() -> dict[tuple[str, str], list[str]]:
    """(from package, to package) -> the file:line of every import that makes the edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path, module in _modules():
        source = _package(module)
        if source is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _targets(node, module, path.name == "__init__.py"):
                dest = _package(target)
                if dest is not None and dest != source:
                    where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
                    edges[(source, dest)].append(where)
    return edges


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components with more than one package (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe(edges: dict[tuple[str, str], list[str]], component: list[str]) -> str:
    lines = [f"cycle among {', '.join(component)}:"]
    for (a, b), where in sorted(edges.items()):
        if a in component and b in component:
            lines.append(f"  {a} -> {b}: {', '.join(where)}")
    return "\n".join(lines)


def long_functions() -> list[str]:
    """`file:line name (N lines)` for each function over the limit without its reason."""
    out = []
    for path, _ in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            doc = (ast.get_docstring(node) or "").lower()
            if length > MAX_FUNCTION_LINES and REASON not in doc:
                out.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name} ({length})")
    return out


# ----------------------------------------------------------------------------- the scan
def test_the_scan_sees_function_level_and_relative_imports(tmp_path):
    tree = ast.parse("def f():\n    from trainforge import parallel, __version__\n")
    node = tree.body[0].body[0]
    assert _targets(node, "trainforge.engine.trainer", False) == [
        "trainforge.parallel",
        "trainforge",
    ]
    relative = ast.parse("from .checks import x\nfrom .. import errors\n").body
    assert _targets(relative[0], "trainforge.doctor", True) == ["trainforge.doctor.checks"]
    assert _targets(relative[1], "trainforge.doctor.facts", False) == ["trainforge.errors"]


def test_a_cycle_is_found_and_named_with_its_imports():
    edges = {("a", "b"): ["x.py:1"], ("b", "c"): ["y.py:2"], ("c", "a"): ["z.py:3"]}
    edges[("c", "d")] = ["w.py:4"]
    assert cycles(edges) == [["a", "b", "c"]]
    text = describe(edges, ["a", "b", "c"])
    assert "c -> a: z.py:3" in text and "c -> d" not in text


# ------------------------------------------------------------------------ the package line
def test_packages_import_each_other_without_a_cycle():
    edges = package_edges()
    assert ("cli", "train") in edges  # the scan reads the real tree
    found = cycles(edges)
    assert not found, "\n".join(describe(edges, c) for c in found)


def test_the_engine_imports_no_task_and_no_observer():
    edges = package_edges()
    upward = {b: edges[("engine", b)] for b in ("tasks", "observe", "train", "run", "cli")}
    assert not any(upward.values()), upward


def test_no_function_is_over_60_lines_without_a_reason():
    found = long_functions()
    assert not found, (
        f"functions over {MAX_FUNCTION_LINES} lines; split them, or say why in a docstring line "
        f"containing {REASON!r}:\n" + "\n".join(found)
    )


# ------------------------------------------------------------------ run-folder names
# The names of what a run folder holds. Only the two modules that own the layout spell them:
# `runfolder.py` (the folder) and `engine/checkpoint.py` (checkpoint folders and their files).
RUN_FOLDER_NAMES = frozenset(
    {
        "run.json", "summary.json", "metrics.jsonl", "config.resolved.yaml", "report.html",
        "report.log", "confusion.json", ".process.json", "checkpoint_meta.json",
        "best_model", "checkpoint_interrupted", "checkpoint_time_limit", "checkpoint-",
        "checkpoint_epoch_", "manifest.json", "meta.json", "state.pt",
    }
)  # fmt: skip
NAME_OWNERS = ("runfolder.py", "engine/checkpoint.py")


def name_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, literal) of every string that spells a run-folder name: the whole string, a
    path ending in one (`x/run.json`), or the fixed part of an f-string (`checkpoint-{n}`).
    A sentence that mentions a name (it has spaces: a hint, a message) is no path."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        value = node.value
        path_like = not any(c.isspace() for c in value)
        ends = path_like and any(value.endswith(f"/{n}") for n in RUN_FOLDER_NAMES)
        if value in RUN_FOLDER_NAMES or ends:
            found.append((node.lineno, value))
    return found


def run_folder_literals() -> list[str]:
    out = []
    for path, _ in _modules():
        where = path.relative_to(ROOT).as_posix()
        if where in NAME_OWNERS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        out += [
            f"{path.relative_to(SRC.parent)}:{line} {value!r}"
            for line, value in name_literals(tree)
        ]
    return out


def test_the_name_scan_sees_plain_path_and_f_string_literals():
    tree = ast.parse(
        'a = "run.json"\nb = f"checkpoint-{step}"\nc = "runs/x/summary.json"\n'
        'd = "running"\ne = f"see {name} checkpoint"\nf = "resume runs/NAME/run.json"\n'
    )
    assert sorted(line for line, _ in name_literals(tree)) == [1, 2, 3]


def test_run_folder_names_are_spelled_only_by_the_modules_that_own_them():
    found = run_folder_literals()
    assert not found, (
        "run-folder names spelled outside runfolder.py and engine/checkpoint.py; use a "
        "RunFolder property or a checkpoint-module function:\n" + "\n".join(found)
    )


# ------------------------------------------------------------------ file circles
def file_edges(package: str) -> dict[tuple[str, str], list[str]]:
    """(from module, to module) -> file:line, for imports between two modules of `package`
    (its `__init__` left out: a package re-exporting its modules is no circle)."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    prefix = f"trainforge.{package}."
    for path, module in _modules():
        if not module.startswith(prefix) or path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets = _targets(node, module, False)
            if isinstance(node, ast.ImportFrom) and node.module == f"trainforge.{package}":
                targets = [f"{prefix}{a.name}" for a in node.names]  # `from pkg import mod`
            for target in targets:
                if target.startswith(prefix) and target != module:
                    edges[(module, target)].append(f"{path.relative_to(SRC.parent)}:{node.lineno}")
    return edges


def test_files_inside_a_package_import_each_other_without_a_circle():
    assert ("trainforge.export.pipeline", "trainforge.export.job") in file_edges("export")
    found = []
    for package in sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()):
        edges = file_edges(package)
        found += [describe(edges, c) for c in cycles(edges)]
    assert not found, "\n".join(found)


MAX_TRAINER_LINES = 350


def test_the_trainer_module_is_at_most_350_lines_without_packing():
    import subprocess
    import sys

    source = (ROOT / "engine" / "trainer.py").read_text()
    unpacked = source.replace("  # fmt: skip\n", "\n")
    ruff = Path(sys.executable).with_name("ruff")
    formatted = subprocess.run(
        [str(ruff), "format", "--stdin-filename", "trainer.py", "-"],
        input=unpacked, capture_output=True, text=True, check=True, cwd=SRC.parent,
    ).stdout  # fmt: skip
    assert formatted.count("\n") <= MAX_TRAINER_LINES, (
        f"engine/trainer.py is {formatted.count(chr(10))} lines laid out by the formatter: move "
        "a part out of the loop (engine.resumable, engine.evaluate, engine.guard show how)"
    )


def test_every_registry_refuses_a_taken_name_unless_told_to_replace_it():
    import pytest

    from trainforge.errors import UserError
    from trainforge.registry import all_registries

    for registry in all_registries().values():
        name = registry.names()[0]  # a built-in entry (the first lookup imports them)
        entry = registry.get(name)
        with pytest.raises(UserError, match="registered already"):
            registry.register(name, object())
        assert registry.get(name) is entry
        registry.register(name, entry, replace=True)  # the same entry: nothing changes
        assert registry.get(name) is entry
