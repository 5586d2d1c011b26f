"""The peers' own virtual environment: TRL's `SFTTrainer` and the HF `Trainer` run from a venv
the benchmark makes from the `bench` extra of pyproject.toml, not from trainforge's.

Why a venv of their own: in trainforge's venv the peers would run with whatever trainforge's
other extras pulled in (peft, the web stack, onnx) and trainforge would be importable beside
them; a peer side must measure what a TRL user installs. The one package both venvs share by
version is torch (`torch==<the running version>`), so both sides run the same kernels and
threads: the ratio is the frameworks', not two builds of PyTorch.

The venv is made once (`.venv-peers` beside `.venv`; TRAINFORGE_PEER_VENV moves it) and kept
while its stamp matches: the torch version and the `bench` requirements. Making it needs the
package index (minutes, once); a failure is one line naming the pip command that failed.

`uv` and `virtualenv` were considered: the stdlib `venv` and pip are what `make venv` uses,
so the peers' venv is made by the same tools.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench_requirements() -> list[str]:
    """The `bench` extra of pyproject.toml, as written there."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(project["project"]["optional-dependencies"]["bench"])


def torch_requirement() -> str:
    import torch

    return f"torch=={torch.__version__.split('+')[0]}"


def venv_dir() -> Path:
    return Path(os.environ.get("TRAINFORGE_PEER_VENV") or ROOT / ".venv-peers")


def peer_python(log=print) -> Path:
    """The peers' interpreter, the venv made or refreshed first where its stamp is stale."""
    folder = venv_dir()
    python = folder / "bin" / "python"
    wanted = [torch_requirement(), *bench_requirements()]
    stamp = folder / ".peers-stamp"
    key = hashlib.sha256(json.dumps(wanted).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == key:
        return python
    log(f"peers' venv {folder}: installing {' '.join(wanted)} (once)")
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(folder)],
        [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [str(python), "-m", "pip", "install", "-q", *wanted],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"making the peers' venv: {' '.join(step)} failed: {tail[0]}")
    stamp.write_text(key)
    return python


def versions(python: Path) -> str:
    """`torch X, transformers Y, trl Z, accelerate W` as the peers' venv has them."""
    code = (
        "import importlib.metadata as m; print(', '.join(f'{n} {m.version(n)}' for n in "
        "('torch', 'transformers', 'trl', 'accelerate')))"
    )
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True).stdout.strip()
