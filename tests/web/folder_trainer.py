"""The web tests' stand-in for `trainforge train`, with the CLI's run folder contract on top
of tests/fakes/fake_trainer.py (which trains, stops and checkpoints, and knows only
`--resume auto`):

- a fresh start writes run.json first (the stand-in records its own argument list there);
- `--resume runs/NAME` alone continues the run recorded in that folder's run.json;
- `CONFIG ... --resume runs/NAME` continues a folder without run.json that has checkpoints;
- `--resume X` naming no run folder, or a folder without run.json and no config given, is
  refused with one line and exit 2, as is a fresh start where a run already is (unless
  --overwrite, which clears the folder).

So a web test fails when the app launches a command the CLI would refuse.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests" / "fakes")]

import fake_trainer  # noqa: E402

from trainforge.runfolder import RunFolder, find_run, resume_command  # noqa: E402


def refuse(line: str) -> int:
    print(f"error: {line}", flush=True)
    return 2


def main(args: list[str]) -> int:
    if "--resume" in args:
        at = args.index("--resume")
        value, args = args[at + 1], args[:at] + args[at + 2 :]
        found = find_run(value)
        if found is None:
            return refuse(f"--resume {value}: not a run folder or checkpoint folder")
        folder = found[0]
        if folder.is_run():
            args = [*folder.read_run()["command"], *args]
        elif not args or args[0].startswith("-"):
            return refuse(f"--resume {value}: {folder.path} has no run record (run.json)")
        return train([*args, "--resume", "auto"])
    sets, _ = fake_trainer.parse(args)
    folder = RunFolder(Path(sets.get("output.dir", "runs")) / sets["output.run_name"])
    found = folder.occupied()
    if found and "--overwrite" not in args:
        return refuse(
            f"run folder {folder.path} already holds a run ({', '.join(found)}); continue it "
            f"with `{resume_command(folder)}` or start it afresh with --overwrite"
        )
    folder.clear()
    folder.path.mkdir(parents=True, exist_ok=True)
    folder.write_run({"command": args})
    return train([*args, "--resume", "auto"])  # auto: the fake keeps the run.json just written


def train(args: list[str]) -> int:
    sys.argv = [sys.argv[0], *args]
    return fake_trainer.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
