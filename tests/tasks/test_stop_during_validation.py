"""Ctrl+C during a 400-word validation: the run stops at the next evaluation batch (or
generated token), saves the optimizer step it is at as `checkpoint_interrupted`, names it,
and `--resume` continues from there.

The signal is real and comes from outside (this test sends SIGINT to the process), at the
moment the run reports it is validating. A wrapper logs, for each generation batch, whether
the stop had been asked for when it began; the test asserts that no batch began after one
that saw it, and prints how long the process took to exit instead of asserting a time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainforge.engine import checkpoint as ckpt
from trainforge.runfolder import RunFolder

REPO = Path(__file__).resolve().parents[2]
WORDS = REPO / "example_datasets" / "g2p"
DEADLINE_S = 600  # a hung process, not speed

# Marks the first validation batch (a file the test waits for) and logs, for every
# generation batch, whether a stop had been asked for when it started.
WRAPPER = """
import os, runpy, sys
from pathlib import Path
from trainforge.engine import stop
from trainforge.tasks.causal_lm import CausalLM
original = CausalLM.generate
def generate(self, *args, **kwargs):
    with open("generate.log", "a") as log:
        log.write(f"{stop.requested()}\\n")
    Path("validating").touch()
    return original(self, *args, **kwargs)
CausalLM.generate = generate
sys.argv = ["trainforge", *sys.argv[1:]]
runpy.run_module("trainforge", run_name="__main__")
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "g2p_cmudict.yaml", tmp_path / "config")
    for name, split, count in (("t", "train", 60), ("v", "val", 400)):
        lines = (WORDS / f"cmudict_{split}.tsv").read_text(encoding="utf-8").splitlines()[:count]
        (tmp_path / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "wrapper.py").write_text(WRAPPER, encoding="utf-8")
    return tmp_path


COMMAND = [
    "train", "config/g2p_cmudict.yaml", "--data_file", "t.tsv", "--eval_file", "v.tsv",
    "--test_file", "null", "--max_steps", "4", "--eval_steps", "2", "--save_steps", "100",
    "--batch_size", "8", "--per_device_eval_batch_size", "8", "--max_new_tokens", "32",
    "--model_name_or_path", "models/tiny-g2p", "--set", "model.init_size=tiny",
    "--profile", "cpu", "--num_threads", "1",
]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def test_sigint_during_validation_stops_at_the_next_batch_and_resumes(tmp_path, capsys):
    project = _project(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "wrapper.py", *COMMAND], cwd=project, env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (project / "validating").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "the run never started validating"
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=DEADLINE_S)
        exit_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    with capsys.disabled():
        print(f"\nSIGINT during validation: the process exited {exit_s:.1f} s later")
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    calls = (project / "generate.log").read_text().splitlines()
    # 400 words in batches of 8: 50 batches. None starts once the stop was asked for,
    # except the one that had passed its check when the signal came: it may see the
    # request on entry (and then stops at its next token), and no batch follows it.
    assert 1 <= len(calls) < 50 and calls[:-1].count("None") == len(calls) - 1, calls
    assert calls[-1] in ("None", "SIGINT"), calls
    run = RunFolder(project / "runs" / "g2p_cmudict-t")
    interrupted = run.checkpoints / "checkpoint_interrupted"
    assert ckpt.verify(interrupted) is None
    assert json.loads((interrupted / "meta.json").read_text())["global_step"] == 2
    assert f"SIGINT: checkpoint saved to {interrupted.relative_to(project)}" in out
    records = [json.loads(x) for x in run.metrics.read_text().splitlines()]
    assert not [r for r in records if r["split"] == "val"]  # the cut validation is not logged

    resumed = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "--resume", "runs/g2p_cmudict-t"],
        cwd=project, env=_env(), capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    found = re.findall(r"^resumed from (\S+) \(epoch \d+, step (\d+)\), ", resumed.stdout, re.M)
    assert [(Path(p).name, int(s)) for p, s in found] == [("checkpoint_interrupted", 2)]
    assert "done: finished after 4 steps" in resumed.stdout
    assert re.search(r"^validation \(400 examples\): .*per [\d.]+", resumed.stdout, re.M)
