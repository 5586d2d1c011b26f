"""Shipped text (code, docs, scripts, example configs, profiles, README) cites the public
documents it follows by name (the ViT training guide, the Jetson training guide, the
training-pipeline assets README, the training-optimisation notes, the DGX Spark setup plan,
NVIDIA's data sheets), never the project's internal names for them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = (
    "src", "docs", "scripts", "config", "README.md", "Dockerfile.dgx-spark", ".devcontainer",
    "install_cusparselt.sh", "Makefile", "pyproject.toml",
)  # fmt: skip
SUFFIXES = {
    ".py",
    ".md",
    ".yaml",
    ".yml",
    ".json",
    ".sh",
    ".txt",
    ".toml",
    ".html",
    ".js",
    ".dgx-spark",
    "",
}
# "seeds/001", "seed 002", "the seed notes", "HRM training notes", "the seed's pipeline".
INTERNAL = re.compile(
    r"seeds?/0\d\d|\bseed 0\d\d\b|\bseed notes\b|\bHRM\b|\bthe seeds\b|\bseed's\b|\bseeds §",
    re.IGNORECASE,
)


def shipped_files() -> list[Path]:
    files: list[Path] = []
    for name in SHIPPED:
        top = ROOT / name
        candidates = [top] if top.is_file() else top.rglob("*")
        for path in candidates:
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                files.append(path)
    return files


def test_the_scan_reads_code_docs_profiles_and_scripts():
    names = {p.relative_to(ROOT).as_posix() for p in shipped_files()}
    assert "README.md" in names and "src/trainforge/cli.py" in names
    assert "src/trainforge/profiles/jetson-orin.yaml" in names
    assert "scripts/run-dgx-container.sh" in names and "config/g2p_cmudict.yaml" in names
    assert "Dockerfile.dgx-spark" in names and "install_cusparselt.sh" in names


def test_the_pattern_catches_internal_names():
    for text in ("seeds/001", "(seed 002 §6)", "the seed notes' rule", "HRM training notes"):
        assert INTERNAL.search(text), text
    for text in ("training.seed: 42", "nearby seed or epoch values", "the run seeds its RNGs"):
        assert not INTERNAL.search(text), text


def test_no_shipped_text_cites_internal_document_names():
    hits = []
    for path in shipped_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if INTERNAL.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "internal document names in shipped text:\n" + "\n".join(hits)
