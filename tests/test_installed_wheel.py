"""trainforge as a user installs it: the wheel built from this checkout, installed without
`-e` into a fresh virtual environment outside the clone, used from an empty folder.

The environment reuses the dependencies this interpreter has (a `.pth` line naming its
site-packages as a plain path, so the editable install's own `.pth`, which puts the clone's
`src/` on sys.path, is never read): nothing is downloaded. Everything runs in one test
function, so the build and the install are paid once: `trainforge --version` (the wheel's
version), `recipes`, `train vit_digits` to >= 95 % accuracy, `train g2p_cmudict --max_steps
10`, `doctor`, `evaluate` and `export` on the digits run, and `serve` with one run started
through the Train Model dialog's API from a packaged recipe and followed to its end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def build_wheel(out: Path) -> Path:
    """The wheel `pip wheel` builds from the checkout, with this environment's setuptools."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--wheel-dir", str(out), str(REPO)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("trainforge-*.whl")
    return wheel


def fresh_environment(where: Path, wheel: Path) -> Path:
    """A new venv holding the wheel alone, seeing this interpreter's other packages; its bin."""
    venv.create(where, with_pip=False)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "reused-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return where / "bin"


def user_env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", COLUMNS="200")
    return env


def run(bin_dir: Path, cwd: Path, *args: str, timeout: float = 600):
    return subprocess.run(
        [str(bin_dir / "trainforge"), *args], cwd=cwd, env=user_env(bin_dir),
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def api(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def dialog_run_to_the_end(bin_dir: Path, folder: Path) -> dict:
    """`trainforge serve` in `folder`: the dialog offers the packaged recipes; one started
    through its API (the fields the page sends) runs to the end. The run's final view."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (folder / "serve.log").open("w")
    server = subprocess.Popen(
        [str(bin_dir / "trainforge"), "serve", "--port", str(port)], cwd=folder,
        env={**user_env(bin_dir), "PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while "Uvicorn running" not in (folder / "serve.log").read_text():
            assert server.poll() is None and time.monotonic() < deadline, folder / "serve.log"
            time.sleep(0.2)
        shown = api(f"{url}/train/defaults")
        assert {"vit_digits", "g2p_cmudict", "jetson_training"} <= set(shown["choices"]["configs"])
        values = shown["values"]
        assert values["config"] == "vit_digits" and not shown["errors"], shown
        form = {name: values[name] for name in ("config", "task", "dataset", "epochs",
                                                "learning_rate", "batch_size")}  # fmt: skip
        form.update(output_name="from-the-dialog", profile="cpu",
                    overrides=["training.max_steps=3", "training.num_threads=1"])  # fmt: skip
        started = api(f"{url}/runs", form)
        assert started["argv"][0] == "vit_digits", started
        deadline = time.monotonic() + 300
        while (view := api(f"{url}/runs/from-the-dialog"))["status"] in (
            "queued",
            "running",
            "stopping",
        ):
            assert time.monotonic() < deadline, view
            time.sleep(0.5)
        return view
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


@pytest.mark.slow
def test_the_installed_wheel_trains_serves_and_exports_from_an_empty_folder(tmp_path):
    wheel = build_wheel(tmp_path / "dist")
    names = zipfile.ZipFile(wheel).namelist()
    assert "trainforge/recipes/config/vit_digits.yaml" in names
    assert "trainforge/recipes/example_datasets/g2p/cmudict_train.tsv" in names
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n]
    bin_dir = fresh_environment(tmp_path / "env", wheel)
    user = tmp_path / "user"
    user.mkdir()

    where = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import sys, trainforge; print(trainforge.__file__); print('\\n'.join(sys.path))"],
        cwd=user, env=user_env(bin_dir), capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert where[0].startswith(str(tmp_path / "env")), where[0]
    reused = sysconfig.get_paths()["purelib"]  # this venv's packages (in the clone: .venv)
    assert not [p for p in where[1:] if p.startswith(str(REPO)) and p != reused], where

    version = wheel.name.split("-")[1]
    assert run(bin_dir, user, "--version").stdout.strip() == f"trainforge {version}"
    listing = run(bin_dir, user, "recipes")
    assert listing.returncode == 0 and len(listing.stdout.splitlines()) == 7, listing

    digits = run(bin_dir, user, "train", "vit_digits")
    assert digits.returncode == 0, digits.stdout[-3000:] + digits.stderr
    assert digits.stdout.startswith(("config: recipe vit_digits", "cpu threads")), digits.stdout
    assert "config: recipe vit_digits, packaged with trainforge" in digits.stdout
    summary = json.loads((user / "runs" / "vit_digits" / "summary.json").read_text())
    assert summary["final_metrics"]["accuracy"] >= 0.95, summary

    g2p = run(bin_dir, user, "train", "g2p_cmudict", "--max_steps", "10")
    assert g2p.returncode == 0, g2p.stdout[-3000:] + g2p.stderr
    assert "done: finished after 10 steps" in g2p.stdout
    assert (user / "models" / "g2p-small" / "config.json").is_file()  # made in the user's folder

    doctor = run(bin_dir, user, "doctor", "vit_digits")
    assert doctor.returncode in (0, 1) and doctor.stdout.startswith("trainforge doctor: "), doctor
    evaluate = run(bin_dir, user, "evaluate", "runs/vit_digits")
    assert evaluate.returncode == 0, evaluate.stdout + evaluate.stderr
    export = run(bin_dir, user, "export", "runs/vit_digits", "--format", "onnx")
    assert export.returncode == 0, export.stdout + export.stderr
    assert (user / "runs" / "vit_digits" / "export" / "onnx" / "summary.json").is_file()

    view = dialog_run_to_the_end(bin_dir, user)
    assert view["status"] == "completed" and view["step"] == 3, view
    assert sorted(p.name for p in user.iterdir()) == ["models", "runs", "serve.log"]
