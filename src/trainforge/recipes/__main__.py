"""`python -m trainforge.recipes`: rewrite the recipes table in the clone's README.md and
docs/install.md from the one list (`recipes.yaml`)."""

from pathlib import Path

from trainforge.recipes import with_table

CLONE = Path(__file__).resolve().parents[3]
for page in (CLONE / "README.md", CLONE / "docs" / "install.md"):
    page.write_text(with_table(page.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote the recipes table in {page}")
