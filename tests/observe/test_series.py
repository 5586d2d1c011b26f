"""Chart buckets and seeks into metrics.jsonl: at most 1,000 buckets a series whatever the
length, spikes kept, the sidecar never trusted over the jsonl, a resume's truncation by
bisection (bytes read counted through /proc/self/io), a zoomed window as raw points."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainforge.observe import series
from trainforge.observe.loggers import JsonlLogger


def write_records(path: Path, steps: int, spike: int | None = None, val_every: int = 0) -> None:
    """A metrics.jsonl in the real format (JsonlLogger's keys and order), fast."""
    with path.open("w", encoding="utf-8") as fh:
        for step in range(1, steps + 1):
            loss = 100.0 if step == spike else 2.0 / math.sqrt(step)
            fh.write(f'{{"time": {1.7e9 + step * 0.01:.3f}, "split": "train", "step": {step}, '
                     f'"epoch": {step / 67:.4f}, "loss": {loss:.6g}, "lr": 0.001}}\n')  # fmt: skip
            if val_every and step % val_every == 0:
                fh.write(f'{{"time": {1.7e9 + step * 0.01:.3f}, "split": "val", "step": {step}, '
                         f'"epoch": {step / 67:.4f}, "loss": 0.5, "accuracy": 0.9}}\n')  # fmt: skip


def io_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_long_series_is_at_most_1000_buckets_of_min_max_last_and_keeps_its_spike(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_records(path, 50_000, spike=37_777, val_every=5_000)
    view = series.load(path).view()
    loss = view["series"]["train/loss"]
    assert len(loss["step"]) <= 1000 and view["width"] == 64  # 50,000 / 64 = 782 buckets
    at = next(
        i
        for i, (a, b) in enumerate(zip(loss["step"], loss["step"][1:], strict=False))
        if b >= 37_777
    )
    spike = at + 1 if loss["step"][at] < 37_777 else at
    assert loss["max"][spike] == 100.0 and loss["min"][spike] < 0.011
    assert max(loss["max"][:spike] + loss["max"][spike + 1 :]) < 100.0
    assert sum(loss["n"]) == 50_000 and loss["last"][-1] == pytest.approx(2 / math.sqrt(50_000))
    assert view["series"]["val/accuracy"]["n"] == [1] * 10  # sparse: a bucket per record
    latest = series.load(path).latest()
    assert latest["train"]["step"] == 50_000 and latest["val"] == {
        "split": "val", "step": 50_000, "time": pytest.approx(1.7e9 + 500.0), "loss": 0.5,
        "accuracy": 0.9}  # fmt: skip


def test_the_logger_keeps_the_sidecar_and_a_reader_folds_in_what_came_after(tmp_path):
    path = tmp_path / "metrics.jsonl"
    logger = JsonlLogger(path)
    for step in range(1, 1_201):
        logger.log("train", {"loss": 1.0 / step, "nan": float("nan")}, step, step / 10)
    sidecar = json.loads(series.sidecar_path(path).read_text())
    assert sidecar["records"] == 1_000  # saved every 500 records, not at every one
    assert sidecar["offset"] < path.stat().st_size
    read = series.load(path, save=False)
    assert read.records == 1_200 and read.offset == path.stat().st_size
    assert "train/nan" not in read.view()["series"]  # a series of nulls draws nothing
    logger.close()
    assert json.loads(series.sidecar_path(path).read_text())["records"] == 1_200
    rebuilt = series.Buckets()
    series.catch_up(path, rebuilt)
    assert read.view() == rebuilt.view()  # the sidecar's way and the jsonl's agree


def test_two_loggers_on_one_file_keep_buckets_that_match_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    main = JsonlLogger(path)
    main.log("train", {"loss": 1.0}, 1, 0.1)
    other = JsonlLogger(path)  # the closing test record, written by a logger of its own
    other.log("test", {"loss": 0.5}, 1, 0.1)
    other.close()
    main.log("train", {"loss": 0.9}, 2, 0.2)
    main.close()
    fresh = series.Buckets()
    series.catch_up(path, fresh)
    assert main.buckets.offset == path.stat().st_size
    assert series.load(path, save=False).view() == fresh.view()
    assert fresh.view()["series"]["train/loss"]["n"] == [1, 1]


def test_a_sidecar_is_never_trusted_over_a_replaced_jsonl(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_records(path, 3_000)
    series.load(path)  # writes the sidecar
    write_records(path, 3_000, spike=2_000)  # the same size, other bytes (a new run)
    assert series.load(path).view()["series"]["train/loss"]["max"][1000 // 2] == 100.0
    path.write_text("")
    assert series.load(path).view()["series"] == {}


def test_a_resume_truncates_by_bisection_and_the_sidecar_matches_a_rebuild(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_records(path, 200_000, val_every=1_000)  # about 19 MB
    series.load(path)
    with path.open("a") as fh:
        fh.write('{"time": 1.7e9, "split": "train", "st')  # a line torn by kill -9
    size = path.stat().st_size
    before = io_read()
    dropped = series.truncate(path, 123_456)
    read = io_read() - before
    # A few lines per bisection step, the sidecar and the one recomputed cell: a scan
    # would read the whole 19 MB.
    assert read < 1_500_000 and size > 15_000_000
    assert dropped == size - path.stat().st_size
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["step"] == 123_456 and json.loads(lines[-1])["split"] == "train"
    assert len(lines) == 123_456 + 123
    fresh = series.Buckets()
    series.catch_up(path, fresh)
    kept = series.load(path, save=False)
    assert kept.view() == fresh.view() and kept.offset == path.stat().st_size
    with path.open("a") as fh:  # the resumed run goes on where it was cut
        fh.write('{"time": 1.8e9, "split": "train", "step": 123457, "epoch": 1, "loss": 9.0}\n')
    assert series.load(path).latest()["train"]["loss"] == 9.0


def test_truncation_reads_the_same_few_lines_at_a_thousand_records_and_at_a_million(tmp_path):
    """The bytes a truncation reads do not grow with the file (ratio, not seconds)."""
    costs = []
    for steps in (1_000, 100_000):
        path = tmp_path / f"m{steps}" / "metrics.jsonl"
        path.parent.mkdir()
        write_records(path, steps)
        series.load(path)
        before = io_read()
        series.truncate(path, steps - 10)
        costs.append(io_read() - before)
    assert costs[1] < 6 * costs[0]


@pytest.mark.parametrize("step", [0, 1, 2, 499, 500, 999, 1_000, 5_000])
def test_bisection_agrees_with_a_scan(tmp_path, step):
    path = tmp_path / "metrics.jsonl"
    write_records(path, 1_000, val_every=7)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(600, b"not json\n")  # a damaged line inside, and a torn one at the end
    path.write_bytes(b"".join(lines) + b'{"split": "tr')
    end, expected = 0, 0
    for line in lines:
        end += len(line)
        if line.startswith(b"{") and json.loads(line)["step"] <= step:
            expected = end  # just after the last record not past the step
    assert series.offset_after(path, step) == expected


def test_a_zoomed_window_is_raw_points_and_a_wide_one_is_buckets(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_records(path, 100_000, spike=77_777, val_every=1_000)
    near = series.window(path, 77_000, 77_900)
    assert near["raw"] and near["width"] == 1
    loss = near["series"]["train/loss"]
    assert loss["step"] == list(range(77_000, 77_901)) and max(loss["max"]) == 100.0
    assert near["series"]["val/accuracy"]["step"] == [77_000]
    wide = series.window(path, 10_000, 90_000)
    assert not wide["raw"] and len(wide["series"]["train/loss"]["step"]) <= 1000
    assert max(wide["series"]["train/loss"]["max"]) == 100.0
    assert wide["series"]["train/loss"]["step"][0] >= 10_000
    assert wide["series"]["train/loss"]["step"][-1] == 90_000
