"""A stand-in for `trainforge train` in the web app's fast tests: same arguments, same run
folder contract (metrics.jsonl lines, summary.json, checkpoints/checkpoint_interrupted,
models/NAME with trainforge.json, the step counts in run.json when the run has one,
exit 0 / 130 / 143), in milliseconds instead of the
seconds that importing torch takes. The real trainer runs under the web app in the slow and
browser tests. Environment knobs: FAKE_TRAINER_STEPS (default 20), FAKE_TRAINER_STEP_S
(default 0.05), FAKE_TRAINER_CRASH_AT (a step: exit 1 with a traceback there),
FAKE_TRAINER_ENV_DUMP (a file to write the environment's variable names to).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def parse(argv: list[str]) -> tuple[dict[str, str], bool]:
    sets: dict[str, str] = {}
    resume = False
    for i, arg in enumerate(argv):
        if arg == "--set":
            key, _, value = argv[i + 1].partition("=")
            sets[key] = json.loads(value) if value.startswith('"') else value
        if arg == "--resume":
            resume = argv[i + 1] == "auto"
    return sets, resume


def record_steps(run_dir: Path, steps: int) -> None:
    """Add the run's step counts to its run.json, as the trainer does once it knows them."""
    from trainforge.runfolder import RunFolder

    folder = RunFolder(run_dir)
    if folder.is_run():
        folder.write_run({**folder.read_run(), "total_steps": steps, "steps_per_epoch": steps // 2})


def main() -> int:
    sets, resume = parse(sys.argv[1:])
    dump = os.environ.get("FAKE_TRAINER_ENV_DUMP")
    if dump:
        Path(dump).write_text("\n".join(sorted(os.environ)), encoding="utf-8")
    run_dir = Path(sets.get("output.dir", "runs")) / sets["output.run_name"]
    steps = int(os.environ.get("FAKE_TRAINER_STEPS", "20"))
    step_s = float(os.environ.get("FAKE_TRAINER_STEP_S", "0.05"))
    crash_at = int(os.environ.get("FAKE_TRAINER_CRASH_AT", "-1"))
    checkpoint = run_dir / "checkpoints" / "checkpoint_interrupted"
    start = 0
    if resume and (checkpoint / "step.txt").is_file():
        start = int((checkpoint / "step.txt").read_text())
    elif not resume and run_dir.exists():
        for path in sorted(run_dir.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    stop: list[str] = []
    signal.signal(signal.SIGINT, lambda *_: stop.append("SIGINT"))
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    print(f"steps: {steps} ({steps // 2}/epoch)", flush=True)
    record_steps(run_dir, steps)
    metrics = (run_dir / "metrics.jsonl").open("a", encoding="utf-8")
    step = start
    while step < steps and not stop:
        step += 1
        if step == crash_at:
            raise RuntimeError(f"fake crash at step {step}")
        time.sleep(step_s)
        record = {"time": time.time(), "split": "train", "step": step, "epoch": step / (steps / 2),
                  "loss": 2.0 / step, "accuracy": step / steps, "lr": 1e-3, "samples_per_s": 100.0,
                  "data_wait_share": 0.05, "cpu_util_pct": 12.5}  # fmt: skip
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
    metrics.write(json.dumps({"split": "val", "step": step, "loss": 1.0, "accuracy": 0.5}) + "\n")
    metrics.close()
    interrupted = bool(stop)
    if interrupted:
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "step.txt").write_text(str(step))
        print(f"{stop[0]}: checkpoint saved to {checkpoint}", flush=True)
    elif sets.get("output.model_name"):
        model = Path(sets.get("output.models_dir", "models")) / sets["output.model_name"]
        model.mkdir(parents=True, exist_ok=True)
        (model / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
        summary = {"task": "causal-lm", "global_step": step, "metrics": {"loss": 1.0}}
        (model / "trainforge.json").write_text(json.dumps(summary))
    summary = {"interrupted": interrupted, "signal": stop[0] if stop else None,
               "stop_reason": "signal" if stop else "finished", "global_step": step}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    print(f"done after {step} steps", flush=True)
    return 128 + int(getattr(signal, stop[0])) if stop else 0


if __name__ == "__main__":
    sys.exit(main())
