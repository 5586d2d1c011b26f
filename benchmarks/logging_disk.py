"""What `logging.logging_steps=1` costs on disk: the `vit_digits` recipe as shipped (its
model, its 40 epochs, its checkpoints, telemetry and TensorBoard on), with a metrics record
at every step, then a day of it extrapolated at the steps/s this machine trained.

Measured from the run folder the real `trainforge train` leaves:

- metrics.jsonl: bytes per train record (the lines of split `train`: their total length
  over their count), and the telemetry and validation lines beside them;
- TensorBoard: the event file's bytes by kind, each record with its TFRecord framing
  (12 bytes of length and checksum before it, 4 after): the train scalars per logged step,
  one weight-histogram set (written every `logging.histogram_steps`), and the rest;
- checkpoints: one checkpoint folder's bytes and how many the run keeps
  (`checkpoint.save_total_limit`, the periodic ones and `best_model`).

`python benchmarks/logging_disk.py [--steps N]` runs it alone (default: the recipe's own
length); `make bench ONLY=logging_disk` as INFO rows (no targets: bytes, not speed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import table

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "config" / "vit_digits.yaml"
DAY_S = 86_400
TFRECORD_FRAMING = 16  # uint64 length + its crc32c, then the data, then the data's crc32c


def tensorboard_bytes(folder: Path) -> dict[str, Any]:
    """Event bytes (framing included) by kind: train scalars, histogram sets, the rest."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2

    kinds = {"train_scalars": 0, "histograms": 0, "other": 0}
    train_steps: set[int] = set()
    histogram_steps: set[int] = set()
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for raw in RawEventFileLoader(str(path)).Load():
            event = event_pb2.Event.FromString(raw)
            size = len(raw) + TFRECORD_FRAMING
            values = event.summary.value
            if any(v.HasField("histo") for v in values):
                kinds["histograms"] += size
                histogram_steps.add(event.step)
            elif values and all(v.tag.startswith("train/") for v in values):
                kinds["train_scalars"] += size
                train_steps.add(event.step)
            else:
                kinds["other"] += size
    return {**kinds, "train_steps": len(train_steps), "histogram_sets": len(histogram_steps)}


def jsonl_bytes(path: Path) -> dict[str, list[int]]:
    """{split: [bytes of each line, newline included]} of a metrics.jsonl."""
    splits: dict[str, list[int]] = {}
    with path.open("rb") as fh:
        for line in fh:
            splits.setdefault(json.loads(line).get("split", "?"), []).append(len(line))
    return splits


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(work: Path, steps: int | None) -> dict[str, Any]:
    sets = ["logging.logging_steps=1", "logging.progress_bar=false", "output.run_name=disk"]
    if steps:
        sets.append(f"training.max_steps={steps}")
    cmd = [sys.executable, "-m", "trainforge", "train", str(RECIPE),
           *[arg for value in sets for arg in ("--set", value)]]  # fmt: skip
    log = work / "train.log"
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"trainforge train exited {rc}: {log.read_text()[-800:]}")
    folder = work / "runs" / "disk"
    segment = json.loads((folder / "run.json").read_text())["segments"][-1]
    splits = jsonl_bytes(folder / "metrics.jsonl")
    train = splits.pop("train")
    times = [json.loads(line)["time"] for line in (folder / "metrics.jsonl").open()
             if '"split": "train"' in line]  # fmt: skip
    steps_per_s = (len(times) - 1) / (times[-1] - times[0])
    kept = sorted(p for p in (folder / "checkpoints").iterdir() if p.is_dir())
    periodic = [p for p in kept if p.name.startswith("checkpoint")] or kept
    command = "trainforge train config/vit_digits.yaml " + " ".join(f"--set {s}" for s in sets)
    return {
        "command": command, "jsonl_train": train, "jsonl_other": splits,
        "tensorboard": tensorboard_bytes(folder / "tensorboard"), "steps_per_s": steps_per_s,
        "checkpoint_bytes": folder_bytes(periodic[-1]), "checkpoints_kept": len(kept),
        "checkpoint_names": [p.name for p in kept], "started": segment.get("started"),
    }  # fmt: skip


def run(steps: int | None = None) -> tuple[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="trainforge-logging-disk-"))
    try:
        started = time.perf_counter()
        m = measure(work, steps)
        took = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    train, tb = m["jsonl_train"], m["tensorboard"]
    per_record = sum(train) / len(train)
    per_step_tb = tb["train_scalars"] / tb["train_steps"]
    per_histogram = tb["histograms"] / max(1, tb["histogram_sets"])
    day_steps = m["steps_per_s"] * DAY_S
    gb = 1e9
    rows = [
        ["metrics.jsonl, train record", f"{per_record:.0f} B", f"{len(train):,} records",
         f"{day_steps * per_record / gb:.1f} GB"],
        ["TensorBoard, train scalars of one step", f"{per_step_tb:.0f} B",
         f"{tb['train_steps']:,} steps", f"{day_steps * per_step_tb / gb:.1f} GB"],
        ["TensorBoard, one weight-histogram set", f"{per_histogram / 1e3:.1f} kB",
         f"{tb['histogram_sets']} sets", "(every logging.histogram_steps, not every step)"],
        ["checkpoint folder", f"{m['checkpoint_bytes'] / 1e3:.1f} kB",
         f"{m['checkpoints_kept']} kept ({', '.join(m['checkpoint_names'])})",
         f"{m['checkpoints_kept'] * m['checkpoint_bytes'] / 1e6:.2f} MB"],
    ]  # fmt: skip
    others = ", ".join(
        f"{k} {len(v)} x {sum(v) / len(v):.0f} B" for k, v in m["jsonl_other"].items()
    )
    text = (
        table(
            f"logging_steps=1 on disk: {m['command']} ({took:.0f} s); {m['steps_per_s']:.1f} "
            f"steps/s here, so a day is {day_steps:,.0f} steps",
            ["what", "size", "in this run", "a day at this rate"],
            rows,
        )
        + f"\nother metrics.jsonl lines: {others}; other TensorBoard events: {tb['other']:,} B"
    )
    return text, {
        "logging_jsonl_bytes_per_record": per_record,
        "logging_tensorboard_bytes_per_step": per_step_tb,
        "logging_day_gb": day_steps * (per_record + per_step_tb) / gb,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="training.max_steps")
    print(run(parser.parse_args().steps)[0])
