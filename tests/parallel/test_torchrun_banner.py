"""`trainforge-torchrun`, the command the docs give for several processes: torchrun with the
same arguments, without torchrun's own "Setting OMP_NUM_THREADS" banner, and each process
still gets OMP_NUM_THREADS=1 as torchrun gives it. Plain torchrun, beside it, prints the
banner: that is what the wrapper takes away.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
BANNER = "Setting OMP_NUM_THREADS environment variable"
# Each process prints the thread count it was started with, in one write (the two processes
# share the pipe: a line written in pieces can interleave with the other's).
SHOW = [
    "--no-python",
    sys.executable,
    "-c",
    "import os; os.write(1, f\"omp={os.environ['OMP_NUM_THREADS']}\\n\".encode())",
]


def launch(command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    words = [str(BIN / command), "--standalone", "--nproc-per-node", "2", *SHOW]
    return subprocess.run(words, capture_output=True, text=True, env=env, timeout=300)


def test_trainforge_torchrun_sets_the_threads_without_torchruns_banner() -> None:
    ours = launch("trainforge-torchrun")
    assert ours.returncode == 0, ours.stdout + ours.stderr
    assert re.findall(r"omp=(\S+)", ours.stdout) == ["1", "1"]
    assert BANNER not in ours.stdout + ours.stderr

    theirs = launch("torchrun")
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    assert BANNER in theirs.stdout + theirs.stderr  # what the wrapper leaves out
