"""Every shell command shown in README.md and docs/*.md is run here or marked, so docs cannot rot.

What counts as a command: every line of a ```bash / sh / shell / console block (continuation
lines joined, `$ ` prompts dropped, comment-only lines not), and `$ ` lines of other blocks
(transcripts). Pages are found by globbing, so a new page is covered without editing this file.

The marker convention (visible in the rendered page, README "Tour of the commands"): a
command the tests do not run carries a shell comment with `needs: WHAT` (hardware or access
the tests lack: a Jetson, a Slurm cluster, CUDA GPUs, root, the network), `ci: WHAT` (a CI
entry point itself, e.g. `make test`) or `long: WHAT` (hours of work; names what covers it).
On the command's own line it marks that command; as a comment line of its own it marks every
command below it in the block. A command that is neither marked nor runnable here fails
`test_every_command_is_run_or_marked`.

How each kind of command is exercised:
- quick `trainforge` commands (validate, config show, profiles, detect, doctor, jetson-wheel,
  slurm, models list) and the platform scripts (`--dry-run`, wheel tables): run as written in
  the default suite (`test_quick_command_runs`). `doctor` may answer 0 or 1 on this machine:
  the test checks that the exit code is 1 exactly when the report has a finding.
- everything that trains, writes or serves runs as written, in page order, in a scratch copy
  of the checkout per page (`test_page_commands_run`, slow), with these offline-safe changes:
  `trainforge train` gets `--set training.max_steps=2` (4 when it resumes),
  `checkpoint.save_steps=2`, `schedule.warmup_steps=0`, a micro-batch of 16 (not with
  `--batch_size auto`) and, for a fresh run, `output.overwrite=true`; CIFAR-10 configs read
  the tiny CIFAR-10 written in the real format by the `tiny_cifar` fixture instead of
  downloading; a `--resume_from` path that such a short run cannot have
  (`checkpoint_epoch_50`) becomes that run's newest checkpoint, in the ViT guide's form
  `CONFIG --resume_from checkpoints/NAME.pth` when the page writes it so; a command reading
  `runs/NAME` that the page never trained first trains `config/NAME.yaml` the same short way;
  placeholders in PLACEHOLDERS get the value named there; `trainforge serve` and the `curl`
  lines against it run on a free port, and the server must answer HTTP before it is stopped;
  `make demo` runs its Makefile recipe; `torchrun` runs its processes (Gloo on CPU);
  `scripts/build_g2p_dataset.py` writes to a temporary folder, which must equal the shipped
  `example_datasets/g2p/`; `benchmarks/g2p.py` gets a 3 s budget and 20 test words.

Printed lines: a page that quotes a command's output (PRINTED) must still quote it, and the
command must print it where it runs (quick commands, page runs); the two quotes whose
commands are slow here (a 2-process torchrun, CIFAR-10 offline) are also checked in the
default suite, through the same planning code and the same command with the network cut.

The module is over 400 lines because the parser, the marker rules and one runner per kind of
command belong together: each rule is only meaningful next to the others.
"""

from __future__ import annotations

import filecmp
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")))
SHELL_LANGUAGES = {"bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
MARKER = re.compile(r"(?:^|[\s;]|(?P<paren>\())(needs|ci|long):\s*(\S.*)")
# Leading `NAME=VALUE` environment assignments of a command (`$(...)` values included).
ASSIGNMENTS = re.compile(r"((?:[A-Z_]+=(?:\$\([^)]*\)|\S+)\s+)*)(.*)", re.S)
# Pages other developers own: commands there that need a marker they do not have yet. Each
# entry must still match an unmarked command (the test says when to drop it).
PENDING_MARKERS: dict[tuple[str, str], str] = {}
# Documented commands that fail today for a reason reported to the code's owner: the test
# checks they still fail that way, so the entry has to go once the code is fixed.
KNOWN_FAILURES: dict[str, str] = {}
# Placeholders a reader replaces, and what the tests use (made by an earlier command).
PLACEHOLDERS = {
    "models/NAME": "models/tiny",
    "my_data.jsonl": "example_datasets/jetson_training.json",
}
# Lines a page quotes from a command's output: (page, the command as the page shows it, or
# None when the page quotes an error no command of its own prints; the quoted text). The
# quote must be on its page (whitespace as rendered), and the command, wherever it runs here
# (quick commands, page runs, or the focused tests below), must print it.
PRINTED: list[tuple[str, str | None, str]] = [
    (
        "docs/hpc_training.md",
        "trainforge-torchrun --standalone --nproc-per-node 2 -m trainforge train "
        "config/vit_digits.yaml",
        "batch: 32 x 1 accumulation x 2 processes = 64",
    ),
    (
        "docs/distributed.md",
        "trainforge-torchrun --standalone --nproc-per-node 2 -m trainforge train "
        "config/vit_digits.yaml",
        "batch: 32 x 1 accumulation x 2 processes = 64",
    ),
    (
        "docs/llm_finetuning.md",
        "trainforge train config/jetson_training.json --base-model models/NAME --output-name "
        "my-model",
        "train: 266 records -> 266 examples, 0 truncated to max_seq_length=512, 0 dropped",
    ),
    (
        "docs/coming_from.md",
        "trainforge profiles template cpu",
        "# Folder holding the data set files.",
    ),
    (
        "docs/data.md",
        None,
        "or run again when online (data.download is already true)",
    ),
]
QUICK_TRAINFORGE = {"validate", "config", "profiles", "detect", "doctor", "jetson-wheel", "slurm"}
WRITING_TRAINFORGE = {"train", "export", "bench-infer", "report", "serve", "render"}
# A 2-step run cannot hold a config's warmup (e.g. g2p_cmudict.yaml's 200 steps).
TRAIN_SUFFIX = ("--set", "checkpoint.save_steps=2", "--set", "schedule.warmup_steps=0")
SMALL_BATCH = ("--set", "training.per_device_train_batch_size=16")
# Platform scripts: those under scripts/, and the one the Jetson guide runs from the root.
ROOT_SCRIPTS = ("scripts/", "install_cusparselt.sh")
# Entries of the checkout that page runs must not touch (they get fresh ones).
USER_CONTENT = {"runs", "models", "data", "outputs", ".git", ".venv"}


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str
    marker: str | None  # "needs: ...", "ci: ...", "long: ..." or None

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line}:{self.text[:60]}"


def open_quote(text: str) -> bool:
    """Whether a shell quote is still open at the end of `text` (it goes on next line)."""
    quote = None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and quote is None:
            break
    return quote is not None


def split_comment(line: str) -> tuple[str, str]:
    """(code, comment) of a shell line; `#` inside quotes or words is not a comment."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip(), line[index + 1 :].strip()
    return line.rstrip(), ""


def logical_lines(lines: list[str], first: int) -> list[tuple[int, str]]:
    """(line number, text) with `\\` continuations and quotes open across lines joined."""
    joined, start, text = [], None, ""
    for number, line in enumerate(lines, first):
        start = number if start is None else start
        if line.rstrip().endswith("\\"):
            text += line.strip()[:-1].rstrip() + " "
            continue
        text += line.strip()
        if open_quote(text):
            text += "\n"
            continue
        joined.append((start, text))
        start, text = None, ""
    return joined


def marker_of(comment: str) -> str | None:
    """`needs: ...` / `ci: ...` / `long: ...` in a comment; `(needs: x)` loses its `)`."""
    mark = MARKER.search(comment)
    if mark is None:
        return None
    reason = mark.group(3).removesuffix(")") if mark.group("paren") else mark.group(3)
    return f"{mark.group(2)}: {reason}"


def block_commands(page: str, language: str, lines: list[str], first: int) -> list[Command]:
    commands, block_marker = [], None
    shell = language in SHELL_LANGUAGES
    for number, text in logical_lines(lines, first):
        text = text.strip()
        if not shell and not text.startswith("$ "):
            continue
        code, comment = split_comment(text.removeprefix("$ "))
        mark = marker_of(comment)
        if not code:
            block_marker = mark or block_marker
            continue
        marker = mark or block_marker
        commands.append(Command(page, number, code, marker))
    return commands


def read_commands(page: str) -> list[Command]:
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    commands, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening.group(1)
        end = next(
            i for i in range(index + 1, len(lines)) if lines[i].strip().startswith(fence[:3])
        )
        body = lines[index + 1 : end]
        commands += block_commands(page, opening.group(2).lower(), body, index + 2)
        index = end + 1
    return commands


def pending_marker(command: Command) -> str | None:
    for (page, prefix), marker in PENDING_MARKERS.items():
        if command.page == page and command.text.startswith(prefix):
            return marker
    return None


ALL = [command for page in PAGES for command in read_commands(page)]
UNMARKED = [c for c in ALL if c.marker is None and pending_marker(c) is None]


def words_of(command: Command) -> list[str]:
    """The command's words after placeholders, without leading `NAME=VALUE` assignments."""
    text = command.text
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return shlex.split(ASSIGNMENTS.match(text).group(2))


def plan(command: Command) -> str | None:
    """ "quick" (default suite), "page" (slow, in the page's scratch checkout) or None."""
    words = words_of(command)
    if not words:
        return None
    head, rest = words[0], words[1:]
    if head == "trainforge" and rest:
        listing = rest[:2] in (["models", "list"], ["targets", "list"]) or rest in (
            ["jobs"],
            ["recipes"],
            ["--version"],
        )
        if rest[0] in QUICK_TRAINFORGE or listing:
            return "quick"
        if rest[0] in WRITING_TRAINFORGE or rest[:2] in (["models", "init"], ["recipes", "copy"]):
            return "page"
    script = next((w for w in words[:2] if w.removeprefix("./").startswith(ROOT_SCRIPTS)), None)
    if script == "scripts/build_g2p_dataset.py":
        return "page"
    if script is not None and head in ("python", "python3", "bash", script):
        return "quick"
    if words[:2] in (["python", "benchmarks/g2p.py"], ["make", "demo"]):
        return "page"
    if head in ("torchrun", "trainforge-torchrun") and "--nproc-per-node" in words:
        return "page" if int(words[words.index("--nproc-per-node") + 1]) <= 2 else None
    if head == "curl" and "http://127.0.0.1:8000/api/" in command.text:
        return "page"
    return None


def test_pages_and_markers_are_found() -> None:
    assert "README.md" in PAGES and "docs/hpc_training.md" in PAGES
    assert len(ALL) > 80, len(ALL)
    marked = [c for c in ALL if c.marker is not None]
    assert {c.marker.split(":")[0] for c in marked} == {"needs", "ci", "long"}
    assert not any(c.marker.endswith(")") and "(" not in c.marker for c in marked)
    for command in marked:
        assert len(command.marker.split(":", 1)[1].strip()) > 3, command.label


def test_parser_on_a_sample() -> None:
    lines = [
        "# needs: a Slurm cluster",
        "sbatch x.sh 'a # b' \\",
        "    --flag   # tail",
    ]
    (only,) = block_commands("p.md", "bash", lines, 1)
    assert (only.text, only.marker) == ("sbatch x.sh 'a # b' --flag", "needs: a Slurm cluster")
    plain = block_commands("p.md", "text", ["$ trainforge detect  # prints", "output"], 1)
    assert [(c.text, c.marker) for c in plain] == [("trainforge detect", None)]


def test_every_command_is_run_or_marked() -> None:
    unknown = [c.label for c in UNMARKED if plan(c) is None]
    assert not unknown, (
        f"run these in this test (see plan()) or mark them `# needs: ...`: {unknown}"
    )


def test_pending_markers_are_still_needed() -> None:
    for page, prefix in PENDING_MARKERS:
        hits = [c for c in ALL if c.page == page and c.text.startswith(prefix)]
        assert hits, f"{page}: no command starts with {prefix!r}: drop it from PENDING_MARKERS"
        assert all(c.marker is None for c in hits), f"{page} marks it now: drop {prefix!r}"


def test_known_failures_are_documented_commands() -> None:
    texts = {c.text for c in UNMARKED}
    assert set(KNOWN_FAILURES) <= texts


def rendered(page: str) -> str:
    """The page's text with runs of whitespace as one space (a quote may wrap)."""
    return " ".join((REPO / page).read_text(encoding="utf-8").split())


def quoted_lines(command: Command) -> list[str]:
    """What the command's page quotes of its output (PRINTED)."""
    return [q for page, text, q in PRINTED if page == command.page and text == command.text]


def assert_prints_the_quotes(command: Command, output: str) -> None:
    for quote in quoted_lines(command):
        assert quote in output, (
            f"{command.page} quotes {quote!r}; {command.text} printed:\n{output}"
        )


def test_printed_quotes_are_on_their_pages_with_their_commands() -> None:
    texts = {(c.page, c.text) for c in UNMARKED}
    for page, command, quote in PRINTED:
        assert quote in rendered(page), f"{page} no longer quotes {quote!r}"
        if command is not None:
            assert (page, command) in texts, f"{page} shows no unmarked command {command!r}"


def test_the_quoted_two_process_batch_is_the_plan() -> None:
    """The start line's batch for `torchrun --nproc-per-node 2 ... config/vit_digits.yaml`,
    planned as that run plans it (the run itself is in the page runs, slow)."""
    from trainforge.config import validate
    from trainforge.run.header import batch_text

    resolved = validate(REPO / "config/vit_digits.yaml", world_size=2, for_profile=True)
    line = batch_text(resolved.config.training, 2)
    quotes = {q for _, c, q in PRINTED if c and "--nproc-per-node 2" in c and "batch:" in q}
    assert quotes == {line}


def test_the_quoted_cifar10_offline_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/data.md's line for CIFAR-10 missing with data.download already true, offline:
    torchvision's download raises what urllib raises without a network."""
    from torchvision.datasets import CIFAR10

    def offline(self) -> None:
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(CIFAR10, "download", offline)
    root = tmp_path / "cifar10"
    words = [
        "trainforge", "train", "config/vit_cifar10.yaml", "--profile", "cpu",
        "--set", f"data.root={root}", "--set", "data.download=true",
        "--set", f"output.dir={tmp_path / 'runs'}",
    ]  # fmt: skip
    result = run_trainforge(words, monkeypatch, capsys, REPO)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    (quote,) = [q for page, _, q in PRINTED if page == "docs/data.md"]
    assert quote in line and "set data.download=true" not in line
    assert not (tmp_path / "runs").exists()


# --- the quick commands (default suite) ---------------------------------------------------

QUICK = [c for c in UNMARKED if plan(c) == "quick"]


def expand(words: list[str], cwd: Path) -> list[str]:
    """The shell's glob expansion (`config/*.yaml`)."""
    out = []
    for word in words:
        matches = sorted(str(p.relative_to(cwd)) for p in cwd.glob(word)) if "*" in word else []
        out += matches or [word]
    return out


def shell_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This interpreter's bin first (trainforge, torchrun, python), src importable."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO / "src")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("CUDA_VERSION", "TARGETARCH", "WANDB_API_KEY"):
        env.pop(name, None)
    return {**env, **(extra or {})}


def run_shell(text: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", text],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=shell_env(),
        stdin=subprocess.DEVNULL,
    )


def run_trainforge(words: list[str], monkeypatch, capsys, cwd: Path):
    """`trainforge ...` through the real entry point, in this process (imports paid once)."""
    from trainforge import cli

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["trainforge", *expand(words[1:], cwd)])
    code, crash = 0, ""
    try:
        cli.main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except Exception:  # what a user would see as a traceback: the test reports it
        code, crash = 1, traceback.format_exc()
    out = capsys.readouterr()
    return subprocess.CompletedProcess(words, code, out.out, out.err + crash)


@pytest.mark.parametrize("command", QUICK, ids=[c.label for c in QUICK])
def test_quick_command_runs(command: Command, monkeypatch, capsys) -> None:
    words = words_of(command)
    if words[0] == "trainforge":
        result = run_trainforge(words, monkeypatch, capsys, REPO)
    else:
        result = run_shell(command.text, REPO, timeout=120)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    if words[:2] == ["trainforge", "doctor"]:
        # 0 or 1 depending on the machine: 1 exactly when the report has a finding.
        assert result.returncode in (0, 1), output
        assert result.stdout.startswith("trainforge doctor: "), output
        findings = result.stdout.count("\nPROBLEM ") + result.stdout.count("\nwarn ")
        assert (result.returncode == 1) == (findings > 0), output
        assert len(result.stderr.splitlines()) == findings, output
    else:
        assert result.returncode == 0, f"{command.label}\n{output}"
        assert result.stdout.strip(), f"{command.text} printed nothing"
    assert_prints_the_quotes(command, output)


# --- the page runs (slow): training, writing and serving commands, in page order -----------

PAGE_RUNS = sorted({c.page for c in UNMARKED if plan(c) == "page"})


def scratch_checkout(tmp_path: Path) -> Path:
    """A folder that looks like the checkout (links to its files) with its own runs/, models/."""
    work = tmp_path / "checkout"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in USER_CONTENT:
            (work / entry.name).symlink_to(entry)
    return work


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


class Server:
    """A `trainforge serve` command run as written on a free port, until stopped."""

    def __init__(self, text: str, work: Path) -> None:
        self.port = free_port()
        if re.search(r"--port \d+", text):
            text = re.sub(r"--port \d+", f"--port {self.port}", text)
        else:
            text += f" --port {self.port}"
        # `NAME=VALUE exec trainforge ...`: the server replaces bash, so SIGINT reaches it.
        assignments, command = ASSIGNMENTS.match(text).groups()
        self.process = subprocess.Popen(
            ["bash", "-c", f"{assignments}exec {command}"],
            cwd=work,
            env=shell_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.status = self._wait_for_http()

    def _wait_for_http(self) -> int:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.process.poll() is None:
            status = http_status(f"http://127.0.0.1:{self.port}/")
            if status is not None:
                return status
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"the server never answered: {self.process.stdout.read()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class PageRun:
    """The page's writing commands in order, in one scratch checkout."""

    def __init__(self, work: Path, tmp_path: Path, cifar_root: Path, monkeypatch, capsys):
        self.work, self.tmp_path, self.cifar_root = work, tmp_path, cifar_root
        self.monkeypatch, self.capsys = monkeypatch, capsys
        self.api: Server | None = None

    def trainforge(self, words: list[str]):
        return run_trainforge(words, self.monkeypatch, self.capsys, self.work)

    def train(self, words: list[str]):
        resumes = any(w in words for w in ("--resume", "--resume_from"))
        suffix = [*TRAIN_SUFFIX, "--set", f"training.max_steps={4 if resumes else 2}"]
        batch = words[words.index("--batch_size") + 1] if "--batch_size" in words else None
        if batch != "auto":  # `--batch_size auto` is what such a command shows: keep it
            suffix += SMALL_BATCH
        if not resumes:
            suffix += ["--set", "output.overwrite=true"]
        if "--resume_from" in words:
            words = self.short_run_checkpoint(words)
        if "cifar10" in " ".join(words):
            suffix += ["--set", f"data.root={self.cifar_root}", "--set", "data.download=false"]
        result = self.trainforge([*words, *suffix])
        if result.returncode == 0:
            assert "done: " in result.stdout, result.stdout
            if resumes:
                assert "resum" in (result.stdout + result.stderr).lower(), result.stdout
        return result

    def short_run_checkpoint(self, words: list[str]) -> list[str]:
        """`--resume_from` a checkpoint a short run cannot have: its newest one instead. The
        ViT guide's `CONFIG --resume_from checkpoints/NAME.pth` stays in that form (the
        config's run folder is trained first when the page has not)."""
        index = words.index("--resume_from") + 1
        if (self.work / words[index]).exists():
            return words
        guide_form = words[index].startswith("checkpoints/") and words[2].startswith("config/")
        if guide_form:
            run = f"runs/{Path(words[2]).stem}"
            self.needed_runs(["trainforge", "train", run])
            folder = self.work / run / "checkpoints"
        else:
            folder = (self.work / words[index]).parent
        newest = max(folder.glob("checkpoint*/"), key=lambda p: p.stat().st_mtime)
        shown = f"checkpoints/{newest.name}.pth" if guide_form else str(newest)
        return [*words[:index], shown, *words[index + 1 :]]

    def needed_runs(self, words: list[str]) -> None:
        """Train config/NAME.yaml first when a command reads runs/NAME the page never made."""
        for word in words[2:]:
            match = re.match(r"runs/([\w.-]+)", word)
            config = self.work / "config" / f"{match.group(1)}.yaml" if match else None
            if config and config.exists() and not (self.work / "runs" / match.group(1)).exists():
                result = self.train(["trainforge", "train", f"config/{config.name}"])
                assert result.returncode == 0, result.stdout + result.stderr

    def curl(self, text: str):
        if self.api is None:
            self.api = Server("trainforge serve", self.work)
        return run_shell(text.replace("127.0.0.1:8000", f"127.0.0.1:{self.api.port}"), self.work)

    def finish(self) -> None:
        """Wait for runs the API started to end, then stop the server."""
        if self.api is None:
            return
        deadline = time.monotonic() + 300
        url = f"http://127.0.0.1:{self.api.port}/api/runs"
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = response.read().decode()
            if '"running"' not in body and '"stopping"' not in body:
                break
            time.sleep(1)
        self.api.stop()

    def run(self, command: Command):
        words = words_of(command)
        if words[:2] == ["make", "demo"]:
            words = makefile_recipe("demo")
        if words[0] == "trainforge" and words[1] == "serve":
            server = Server(command.text, self.work)
            server.stop()
            # With a token the app answers 401 until signed in; either way it served HTTP.
            assert server.status in (200, 401), server.status
            return subprocess.CompletedProcess(words, 0, f"HTTP {server.status}", "")
        if words[0] == "trainforge":
            self.needed_runs(words)
            return self.train(words) if words[1] == "train" else self.trainforge(words)
        if words[0] == "curl":
            return self.curl(command.text)
        if words[:2] == ["python", "scripts/build_g2p_dataset.py"]:
            return self.rebuild_g2p(command)
        text = command.text
        if words[0] in ("torchrun", "trainforge-torchrun"):
            short = ["training.max_steps=2", "output.overwrite=true"]
            text += " " + shlex.join([*TRAIN_SUFFIX, *(x for s in short for x in ("--set", s))])
        if words[:2] == ["python", "benchmarks/g2p.py"]:
            text = g2p_short(text)
        return run_shell(text, self.work)

    def rebuild_g2p(self, command: Command):
        out = self.tmp_path / "g2p"
        result = run_shell(f"{command.text} --out {out}", self.work)
        shipped = REPO / "example_datasets" / "g2p"
        names = sorted(p.name for p in shipped.glob("*.tsv"))
        assert names and sorted(p.name for p in out.glob("*.tsv")) == names
        _, mismatch, errors = filecmp.cmpfiles(shipped, out, names, shallow=False)
        assert not mismatch and not errors, (mismatch, errors)
        return result


def g2p_short(text: str) -> str:
    """`benchmarks/g2p.py` with a 3 s budget and 20 test words, whether or not the page spells
    `--budget-s` (the default is 120 s of training, which the page run need not spend)."""
    text = re.sub(r"\s--(budget-s|test-words)[ =]\S+", "", text)
    return text.replace("benchmarks/g2p.py", "benchmarks/g2p.py --budget-s 3 --test-words 20", 1)


def test_the_g2p_benchmark_runs_on_a_short_budget_however_the_page_spells_it() -> None:
    assert g2p_short("python benchmarks/g2p.py") == (
        "python benchmarks/g2p.py --budget-s 3 --test-words 20"
    )
    assert g2p_short("python benchmarks/g2p.py --budget-s 120 --threads 2") == (
        "python benchmarks/g2p.py --budget-s 3 --test-words 20 --threads 2"
    )


def makefile_recipe(target: str) -> list[str]:
    """The target's `trainforge` recipe line from the Makefile, as words."""
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = [line.strip() for line in lines[start + 1 :] if line.startswith("\t")][:1]
    assert recipe and "$(VENV)/bin/trainforge" in recipe[0], recipe
    return shlex.split(recipe[0].replace("$(VENV)/bin/trainforge", "trainforge"))


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGE_RUNS)
def test_page_commands_run(page: str, tmp_path: Path, tiny_cifar, monkeypatch, capsys) -> None:
    commands = [c for c in UNMARKED if c.page == page and plan(c) == "page"]
    runner = PageRun(
        scratch_checkout(tmp_path), tmp_path, tiny_cifar["extracted"], monkeypatch, capsys
    )
    try:
        for command in commands:
            result = runner.run(command)
            output = result.stdout + result.stderr
            known = KNOWN_FAILURES.get(command.text)
            if known is not None:
                assert result.returncode != 0 and known in output, (
                    f"{command.label} works now: drop it from KNOWN_FAILURES\n{output}"
                )
                continue
            assert result.returncode == 0, f"{command.label}\n{output}"
            assert "Traceback" not in output, f"{command.label}\n{output}"
            assert result.stdout.strip(), f"{command.label} printed nothing"
            assert_prints_the_quotes(command, output)
    finally:
        runner.finish()


def test_the_readme_and_docs_launch_several_processes_with_trainforge_torchrun():
    """Plain `torchrun` prints its OMP_NUM_THREADS banner into a normal run's output; the
    README, a new user's first page, and every command the docs show use
    `trainforge-torchrun` (the same arguments, no banner)."""
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert "trainforge-torchrun --standalone --nproc-per-node 2 -m trainforge train" in text
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.match(r"\s*(\$ |srun )?torchrun --", line), (
                f"{page.name}:{number}: {line.strip()}"
            )
