"""The DGX Spark kit: scripts/run-dgx-container.sh, Dockerfile.dgx-spark, .devcontainer.

There is no DGX Spark (nor a Docker daemon) here, so the launcher is tested through its
--dry-run output and through a stand-in `docker` on PATH that records what it was given; the
Dockerfile and devcontainer are checked for the seeds/003 contract (NGC base, system Python,
the same mounts and flags as the launcher) and linted with hadolint.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "run-dgx-container.sh"
DOCKERFILE = REPO / "Dockerfile.dgx-spark"
DEVCONTAINER = REPO / ".devcontainer" / "devcontainer.json"
WORKDIR = "/workspace/trainforge"
SECRET = "wandb-secret-0123456789abcdef"
BASH = shutil.which("bash") or "/bin/bash"
SEED_FLAGS = ["--gpus=all", "--ipc=host", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]


def launch(*args: str, env: dict[str, str] | None = None, path: str | None = None):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRAINFORGE_"))}
    base.pop("HF_TOKEN", None)
    base.pop("HF_HOME", None)
    if path is not None:
        base["PATH"] = path
    return subprocess.run(
        [BASH, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**base, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def dry_run(*args: str, env: dict[str, str] | None = None) -> list[str]:
    result = launch("--dry-run", *args, env=env)
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    assert words[:2] == ["docker", "run"]
    return words


def volumes(words: list[str]) -> dict[str, str]:
    """container path -> host path of every -v."""
    pairs = [words[i + 1] for i, word in enumerate(words) if word == "-v"]
    return {target: source for source, target in (p.rsplit(":", 1) for p in pairs)}


def test_dry_run_mounts_project_caches_runs_and_models(tmp_path: Path) -> None:
    words = dry_run(env={"HOME": str(tmp_path)})
    mounts = volumes(words)
    assert mounts[WORKDIR] == str(REPO)
    assert mounts["/root/.cache/huggingface"] == f"{tmp_path}/.cache/huggingface"
    assert mounts[f"{WORKDIR}/runs"] == f"{REPO}/runs"
    assert mounts[f"{WORKDIR}/models"] == f"{REPO}/models"
    assert mounts["/root/.wandb"] == f"{tmp_path}/.wandb"
    assert words[words.index("-w") + 1] == WORKDIR
    assert not (tmp_path / ".cache").exists()  # a dry run creates nothing


def test_dry_run_has_the_seed_flags_and_runs_a_shell_by_default() -> None:
    words = dry_run()
    joined = " ".join(words)
    assert " ".join(SEED_FLAGS) in joined
    assert "--rm" in words
    assert words[-2:] == ["trainforge-dgx-spark", "bash"]
    # No terminal here (stdin is /dev/null): -i without -t, or docker refuses to start.
    assert "-i" in words and "-it" not in words
    # TensorBoard reachable from this machine only; not the whole host network.
    assert words[words.index("-p") + 1] == "127.0.0.1:6006:6006"
    assert "--net=host" not in words


def test_command_runs_verbatim_in_the_image() -> None:
    words = dry_run("--image", "my/img:1", "--", "trainforge", "train", "config/a b.yaml")
    assert words[-4:] == ["my/img:1", "trainforge", "train", "config/a b.yaml"]
    words = dry_run("trainforge", "doctor")
    assert words[-3:] == ["trainforge-dgx-spark", "trainforge", "doctor"]


def test_wandb_key_passes_by_name_and_is_never_printed() -> None:
    result = launch("--dry-run", env={"WANDB_API_KEY": SECRET, "HF_TOKEN": SECRET + "hf"})
    assert result.returncode == 0
    assert SECRET not in result.stdout + result.stderr
    words = shlex.split(result.stdout)
    env_args = [words[i + 1] for i, word in enumerate(words) if word == "-e"]
    assert "WANDB_API_KEY" in env_args and "HF_TOKEN" in env_args
    assert not any(arg.startswith("WANDB_API_KEY=") for arg in env_args)
    # Unset variables are not passed at all (docker would pass them as empty).
    assert "WANDB_API_KEY" not in shlex.split(launch("--dry-run").stdout)


def test_runs_and_models_folders_can_live_elsewhere(tmp_path: Path) -> None:
    env = {
        "TRAINFORGE_RUNS_DIR": str(tmp_path / "big disk/runs"),
        "TRAINFORGE_MODELS_DIR": str(tmp_path / "models"),
        "HF_HOME": str(tmp_path / "hf"),
        "TRAINFORGE_IMAGE": "custom-image",
    }
    words = dry_run(env=env)
    mounts = volumes(words)
    assert mounts[f"{WORKDIR}/runs"] == str(tmp_path / "big disk/runs")
    assert mounts[f"{WORKDIR}/models"] == str(tmp_path / "models")
    assert mounts["/root/.cache/huggingface"] == str(tmp_path / "hf")
    assert words[-2] == "custom-image"


def test_net_host_option_follows_the_seed() -> None:
    words = dry_run("--net-host")
    assert "--net=host" in words and "-p" not in words


def test_unknown_option_is_one_line_and_exit_2() -> None:
    result = launch("--dry-run", "--gpu")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "unknown option '--gpu'" in line and "Fix: put the command after --" in line


# What the docker client prints when its daemon is down (Docker 24+).
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?"
)


def fake_docker(
    bin_dir: Path,
    log: Path,
    *,
    image_exists: bool = True,
    daemon: str | None = None,
    images: tuple[str, ...] | None = None,
) -> None:
    """A `docker` that records its arguments and the WANDB_API_KEY it received; `daemon` is
    what `docker info` prints when its daemon does not answer (None: it answers); `images`,
    when given, are the only images `docker image inspect` finds."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "docker"
    info = "echo 27.0.3; exit 0" if daemon is None else f"echo {shlex.quote(daemon)} >&2; exit 1"
    inspect = f"exit {0 if image_exists else 1}"
    if images is not None:
        names = " ".join(shlex.quote(name) for name in images)
        inspect = f'for i in {names}; do [ "$3" = "$i" ] && exit 0; done; exit 1'
    script.write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = info ]; then {info}; fi\n'
        f'if [ "$1" = image ]; then {inspect}; fi\n'
        f'printf "%s\\n" "$@" > "{log}"\n'
        f'printf "%s" "${{WANDB_API_KEY:-}}" > "{log}.key"\n'
    )
    script.chmod(0o755)


def test_real_run_hands_docker_the_dry_run_command(tmp_path: Path) -> None:
    log = tmp_path / "docker-args"
    fake_docker(tmp_path / "bin", log)
    env = {
        "HOME": str(tmp_path / "home"),
        "WANDB_API_KEY": SECRET,
        "TRAINFORGE_RUNS_DIR": str(tmp_path / "runs"),
        "TRAINFORGE_MODELS_DIR": str(tmp_path / "models"),
    }
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    planned = launch("--dry-run", "trainforge", "doctor", env=env, path=path)
    result = launch("trainforge", "doctor", env=env, path=path)
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == shlex.split(planned.stdout)[1:]
    # The key reached docker through its environment, not through its arguments.
    assert (tmp_path / "docker-args.key").read_text() == SECRET
    assert SECRET not in log.read_text()
    # Mounted folders exist before docker starts (else docker creates them owned by root).
    for folder in ("home/.cache/huggingface", "home/.wandb", "runs", "models"):
        assert (tmp_path / folder).is_dir()


def test_missing_image_says_how_to_build_it(tmp_path: Path) -> None:
    fake_docker(tmp_path / "bin", tmp_path / "log", image_exists=False)
    result = launch(
        env={"HOME": str(tmp_path)}, path=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    )
    assert result.returncode == 2
    assert "docker build -f Dockerfile.dgx-spark -t trainforge-dgx-spark ." in result.stderr
    assert not (tmp_path / "log").exists()


def test_the_plans_own_tag_is_used_when_the_default_image_is_missing(tmp_path: Path) -> None:
    log = tmp_path / "log"
    fake_docker(tmp_path / "bin", log, images=("unsloth-dgx-spark",))
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    result = launch("trainforge", "doctor", env={"HOME": str(tmp_path)}, path=path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        "run-dgx-container.sh: image trainforge-dgx-spark not found; using unsloth-dgx-spark "
        "(the DGX Spark plan's tag)"
    ]
    words = log.read_text().splitlines()
    assert words[words.index("unsloth-dgx-spark") + 1 :] == ["trainforge", "doctor"]
    # An image named by the user is never swapped for another.
    log.unlink()
    named = launch("--image", "mine", "trainforge", env={"HOME": str(tmp_path)}, path=path)
    assert named.returncode == 2 and "image mine not found" in named.stderr
    assert not log.exists()


@pytest.mark.parametrize(
    ("daemon", "said", "fix"),
    [
        (DAEMON_DOWN, "the Docker daemon is not running", "sudo systemctl start docker"),
        (
            "permission denied while trying to connect to the Docker daemon socket at "
            "unix:///var/run/docker.sock",
            "this user may not use the Docker daemon",
            "usermod -aG docker",
        ),
    ],
    ids=["daemon-down", "no-permission"],
)
def test_a_daemon_that_does_not_answer_is_named(tmp_path: Path, daemon, said, fix) -> None:
    # The image is missing too: the daemon is the real problem and is named first.
    fake_docker(tmp_path / "bin", tmp_path / "log", image_exists=False, daemon=daemon)
    result = launch(
        env={"HOME": str(tmp_path)}, path=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"run-dgx-container.sh: {said} (docker info: ") and fix in line
    assert "not found" not in line and "docker build" not in line
    assert not (tmp_path / "log").exists()


def test_missing_docker_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    os.symlink(shutil.which("dirname"), tmp_path / "bin/dirname")
    result = launch(env={"HOME": str(tmp_path)}, path=str(tmp_path / "bin"))
    assert result.returncode == 2
    assert result.stderr.startswith("run-dgx-container.sh: docker is not installed. Fix: ")


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [
        (line.split()[0].upper(), line.split(maxsplit=1)[1])
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_dockerfile_uses_ngc_pytorch_and_the_system_python() -> None:
    instructions = dockerfile_instructions()
    args = {
        value.split("=")[0]: value.split("=", 1)[1]
        for op, value in instructions
        if op == "ARG" and "=" in value
    }
    assert args["BASE_IMAGE"] == "nvcr.io/nvidia/pytorch:25.09-py3"  # seeds/003
    assert ("FROM", "${BASE_IMAGE}") in instructions
    runs = " ".join(value for op, value in instructions if op == "RUN")
    # seeds/003: no virtual environment (and no uv) inside the container.
    assert not re.search(r"\bvenv\b|\buv\b|virtualenv|conda", runs)
    # The container's own torch is pinned before trainforge's dependencies are installed.
    assert "grep -E '^(torch|torchvision|torchaudio|triton)=='" in runs
    assert 'PIP_CONSTRAINT="${TRAINFORGE_CONSTRAINTS}" python -m pip install' in runs
    assert ("WORKDIR", WORKDIR) in instructions
    assert ("CMD", '["/bin/bash"]') in instructions


def test_devcontainer_matches_the_launcher() -> None:
    config = json.loads(DEVCONTAINER.read_text())
    assert config["build"]["dockerfile"] == "../Dockerfile.dgx-spark"
    assert config["workspaceFolder"] == WORKDIR
    assert f"target={WORKDIR}," in config["workspaceMount"]
    assert config["runArgs"] == SEED_FLAGS
    targets = {re.search(r"target=([^,]+)", m).group(1) for m in config["mounts"]}
    launcher_targets = set(volumes(dry_run())) - {WORKDIR}
    assert targets == launcher_targets
    # The key comes from the host environment into the editor's sessions only: it is not
    # written into the container's configuration (where `docker inspect` would show it).
    assert config["remoteEnv"]["WANDB_API_KEY"] == "${localEnv:WANDB_API_KEY}"
    assert "WANDB_API_KEY" not in config.get("containerEnv", {})


def linter(name: str) -> str:
    """The venv's copy (pyproject extra `kits`) or the system's; fail loudly when missing."""
    local = REPO / ".venv" / "bin" / name
    found = str(local) if local.exists() else shutil.which(name)
    assert found, f"{name} is not installed: run `make venv` (pyproject extra `kits`)"
    return found


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "scripts").glob("*.sh")))
def test_shellcheck_passes(script: str) -> None:
    result = subprocess.run(
        [linter("shellcheck"), str(REPO / "scripts" / script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_covers_the_kit_scripts() -> None:
    names = {p.name for p in (REPO / "scripts").glob("*.sh")}
    assert {"install_cusparselt.sh", "run-dgx-container.sh"} <= names
    for name in ("install_cusparselt.sh", "run-dgx-container.sh"):
        assert os.access(REPO / "scripts" / name, os.X_OK)


def test_hadolint_passes() -> None:
    result = subprocess.run(
        [linter("hadolint"), str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
