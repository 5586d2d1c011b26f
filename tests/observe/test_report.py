"""The run report: synthetic run folders written in the real format (metrics.jsonl through the
real JsonlLogger, Jetson telemetry through the real tegrastats parser on recorded lines), and
one tiny digits run trained and reported through the `trainforge` command (`cli.main` in this
process)."""

from __future__ import annotations

import base64
import html
import json
import math
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml

from fakes.in_process import run_main
from trainforge.errors import UserError
from trainforge.hardware.tegrastats import parse_line
from trainforge.observe.loggers import JsonlLogger
from trainforge.observe.report import build_report
from trainforge.observe.report_data import cell_of, class_table, load_run, throughput
from trainforge.observe.report_html import PLOTS_OFF, fmt
from trainforge.observe.report_plots import MAX_POINTS, downsample, plot_specs

REPO = Path(__file__).resolve().parents[2]
TEGRASTATS = REPO / "tests" / "hardware" / "fixtures" / "telemetry" / "tegrastats_jp5.txt"
# Classes cat and dog near the mean; bird 16.7 points below it (0.64 vs a mean of 0.8067).
CONFUSION = {"class_names": ["cat", "dog", "bird"], "matrix": [[45, 3, 2], [4, 44, 2], [10, 8, 32]]}
VAL_ACCURACY = {50: 0.50, 100: 0.80, 150: 0.75, 200: 0.78}  # best at 100, final at 200
VAL_LOSS = {50: 1.40, 100: 0.90, 150: 0.85, 200: 0.88}  # best at 150


class Page(HTMLParser):
    """Every tag's attributes, element ids with their data-value and text, and <script>s."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.attrs: list[tuple[str, dict[str, str]]] = []
        self.ids: dict[str, dict[str, str]] = {}
        self._open: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.attrs.append((tag, attrs))
        if "id" in attrs:
            self.ids[attrs["id"]] = {"value": attrs.get("data-value"), "text": ""}
            self._open.append(attrs["id"])
        else:
            self._open.append("")

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for ident in self._open:
            if ident:
                self.ids[ident]["text"] += data


def write_run(root: Path, *, telemetry: str = "nvml", steps: int = 200, confusion=CONFUSION):
    """A finished classification run folder as the trainer writes it."""
    run = root / "run"
    logger = JsonlLogger(run / "metrics.jsonl")
    jetson = [parse_line(line) for line in TEGRASTATS.read_text().splitlines() if line.strip()]
    for step in range(10, steps + 1, 10):
        epoch = round(step / 50, 4)
        train = {
            "loss": 2.3 * math.exp(-step / 80) + 0.2,
            "accuracy": min(0.95, step / 220),
            "lr": 1e-3 * min(1.0, step / 50),
            "samples_per_s": 400.0 if step <= 100 else 600.0,
            "step_time_s": 0.16 if step <= 100 else 0.1,
            "data_wait_share": 0.10 if step <= 100 else 0.02,
            "compute_time_s": 0.09,
            "grad_norm": 1.5,
            "mfu": 0.30,
        }
        logger.log("train", train, step, epoch)
        if step in VAL_ACCURACY:
            val = {"loss": VAL_LOSS[step], "accuracy": VAL_ACCURACY[step]}
            logger.log("val", val, step, epoch)
            logger.log("val_fast", {"loss": VAL_LOSS[step] + 0.05, "accuracy": 0.7}, step, epoch)
        if telemetry == "nvml":
            reading = {
                "cpu_util_pct": 80.0,
                "ram_used_mib": 8000.0,
                "ram_total_mib": 32000.0,
                "process_rss_mib": 2500.0 + step,
                "gpu0_util_pct": 95.0,
                "gpu0_mem_used_mib": 20000.0,
                "gpu0_mem_total_mib": 81559.0,
                "gpu0_temp_c": 60.0 + step / 20,
                "gpu0_power_w": 300.0,
                "gpu0_sm_clock_mhz": 1980.0,
            }
        else:
            reading = jetson[step // 10 % len(jetson)]
        logger.log("telemetry", reading, step, epoch)
    logger.close()
    summary = {
        "run_dir": str(run),
        "final_metrics": {"loss": VAL_LOSS[200], "accuracy": VAL_ACCURACY[200]},
        "best_metric": 0.80,
        "stop_reason": "finished",
        "interrupted": False,
        "global_step": steps,
        "train_time_s": 3725.0,
        "signal": None,
        "checkpoint": str(run / "checkpoints" / "best_model"),
        "platform": "cuda",
        "device": "cuda:0",
        "device_name": "NVIDIA H100 80GB HBM3",
        "profile": "workstation-24gb",
        "config_hash": "0123456789abcdef",
        "samples_per_s": 512.5,
        "mfu": 0.41,
    }
    (run / "summary.json").write_text(json.dumps(summary))
    config = {
        "name": "synthetic",
        "profile": "workstation-24gb",
        "task": {"kind": "image-classification"},
        "model": {"arch": "vit", "embedding_dim": 64, "num_layers": 2, "num_heads": 2},
        "data": {"dataset": "cifar10"},
        "evaluation": {"metric_for_best_model": "accuracy"},
    }
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(config))
    if confusion is not None:
        (run / "eval").mkdir()
        (run / "eval" / "confusion.json").write_text(json.dumps(confusion))
    return run


def records(run: Path, split: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def test_report_is_self_contained_and_embeds_every_plot(tmp_path):
    run = write_run(tmp_path)
    path = build_report(run)
    assert path == run / "report.html"
    pngs = {p.stem: p.read_bytes() for p in (run / "report").glob("*.png")}
    expected = {"loss", "accuracy", "lr", "samples_per_s", "data_wait", "grad_norm", "mfu"}
    expected |= {"memory", "utilisation", "temperature", "power", "confusion"}
    assert set(pngs) == expected
    assert all(data.startswith(b"\x89PNG\r\n\x1a\n") for data in pngs.values())
    text = path.read_text()
    page = Page(text)
    sources = [attrs["src"] for tag, attrs in page.attrs if "src" in attrs]
    assert len(sources) == len(pngs)
    assert {base64.b64decode(s.split(",", 1)[1]) for s in sources} == set(pngs.values())
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    # No scripts, no stylesheets or links to fetch: the file stands alone.
    assert not [tag for tag, _ in page.attrs if tag in ("script", "link", "iframe")]
    assert not [a for _, a in page.attrs if "href" in a or "http" in a.get("src", "")[:8]]


def test_final_and_best_match_metrics_jsonl(tmp_path):
    run = write_run(tmp_path)
    page = Page(build_report(run).read_text())
    val = records(run, "val")
    for key in ("loss", "accuracy"):
        final = page.ids[f"val-{key}-final"]
        assert float(final["value"]) == val[-1][key]
        assert final["text"] == fmt(key, val[-1][key])
        best = (min if key == "loss" else max)(r[key] for r in val)
        assert float(page.ids[f"val-{key}-best"]["value"]) == best
    assert page.ids["val-accuracy-best"]["text"] == "80.00%"
    assert page.ids["val-accuracy-final"]["text"] == "78.00%"
    assert page.ids["val-loss-best"]["text"] == "0.8500"
    assert float(page.ids["val_fast-loss-best"]["value"]) == VAL_LOSS[150] + 0.05
    assert float(page.ids["train-loss-final"]["value"]) == records(run, "train")[-1]["loss"]
    assert float(page.ids["summary-best_metric"]["value"]) == 0.80


def test_summary_table_shows_time_throughput_hardware_profile_hash(tmp_path):
    run = write_run(tmp_path)
    text = build_report(run).read_text()
    page = Page(text)
    assert page.ids["summary-train_time_s"]["text"] == "1 h 02 min 05 s"
    assert float(page.ids["summary-samples_per_s"]["value"]) == 512.5  # summary.json wins
    assert page.ids["summary-mfu"]["text"] == "41.0%"
    for needle in ("NVIDIA H100 80GB HBM3", "workstation-24gb", "0123456789abcdef", "finished"):
        assert needle in text
    # Data wait over the run, weighted by time: 10 windows of 1.6 s at 10 %, 10 of 1.0 s at 2 %.
    assert float(page.ids["summary-data_wait_share"]["value"]) == pytest.approx(
        (16 * 0.10 + 10 * 0.02) / 26
    )


def test_throughput_is_total_samples_over_total_time():
    train = [
        {"step": 10, "samples_per_s": 100.0, "step_time_s": 1.0},  # 10 s, 1000 samples
        {"step": 11, "samples_per_s": 1000.0, "step_time_s": 0.1},  # 0.1 s, 100 samples
    ]
    speed = throughput(train)
    assert speed.samples_per_s == pytest.approx(1100 / 10.1)
    assert speed.measured_s == pytest.approx(10.1)
    assert speed.step_time_s == pytest.approx(10.1 / 11)


def test_per_class_accuracy_flags_classes_ten_points_below_the_mean(tmp_path):
    table = class_table(load_run(write_run(tmp_path)).confusion)
    assert [r.accuracy for r in table.rows] == [0.9, 0.88, 0.64]
    assert table.mean_accuracy == pytest.approx((0.9 + 0.88 + 0.64) / 3)
    assert [r.name for r in table.flagged] == ["bird"]
    assert table.flagged[0].below_mean_points == pytest.approx((0.8067 - 0.64) * 100, abs=0.01)
    page = Page(build_report(tmp_path / "run").read_text())
    assert page.ids["class-bird-accuracy"]["text"] == "64.00%"
    assert "bird (64.00%)" in page.ids["class-balance"]["text"]
    flagged_rows = [a for tag, a in page.attrs if tag == "tr" and a.get("class") == "flag"]
    assert len(flagged_rows) == 1


def test_balanced_classes_and_an_empty_class_are_not_flagged(tmp_path):
    balanced = {"class_names": ["a", "b", "c"], "matrix": [[9, 1, 0], [1, 8, 1], [0, 0, 0]]}
    run = write_run(tmp_path, confusion=balanced)
    table = class_table(load_run(run).confusion)
    assert table.rows[2].accuracy is None and not table.flagged
    page = Page(build_report(run).read_text())
    assert page.ids["class-balance"]["text"].startswith("balanced")


def test_text_task_metrics_tokens_and_no_class_table(tmp_path):
    run = tmp_path / "run"
    logger = JsonlLogger(run / "metrics.jsonl")
    per = {20: 0.30, 40: 0.12, 60: 0.15}
    for step in (20, 40, 60):
        train = {"loss": 3.0 / step, "lr": 1e-4, "samples_per_s": 8.0, "step_time_s": 0.5}
        logger.log("train", {**train, "tokens_per_s": 4096.0, "data_wait_share": 0.01}, step, 1.0)
        loss = 2.0 / step * 10
        val = {"loss": loss, "perplexity": math.exp(loss), "accuracy": 0.4, "per": per[step]}
        logger.log("val", {**val, "wer": per[step] * 2}, step, 1.0)
    logger.close()
    config = {"task": {"kind": "causal-lm"}, "model": {"model_name_or_path": "models/tiny"}}
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(config))
    text = build_report(run).read_text()
    page = Page(text)
    names = {p.stem for p in (run / "report").glob("*.png")}
    assert {"loss", "perplexity", "per", "wer", "tokens_per_s", "accuracy"} <= names
    assert "confusion" not in names and "class-balance" not in page.ids
    assert page.ids["val-per-best"]["text"] == "12.00%"  # lowest PER, at step 40
    assert page.ids["val-per-final"]["text"] == "15.00%"
    assert float(page.ids["val-perplexity-best"]["value"]) == math.exp(2.0 / 60 * 10)
    assert float(page.ids["summary-tokens_per_s"]["value"]) == 4096.0
    assert "models/tiny" in text and "no eval/confusion.json" not in text


def test_jetson_telemetry_from_tegrastats_lines(tmp_path):
    run = write_run(tmp_path, telemetry="tegrastats")
    specs = {spec.name: spec for spec in plot_specs(load_run(run))}
    assert {"memory", "utilisation", "temperature", "power"} <= set(specs)
    power = [line.label for line in specs["power"].lines]
    assert power[0] == "board total" and "VDD_GPU_SOC" in power
    total = specs["power"].lines[0].y
    assert np.nanmax(total) < 100  # mW read as W
    temps = {line.label for line in specs["temperature"].lines}
    assert {"CPU", "GPU", "TJ"} <= temps
    build_report(run)
    assert (run / "report" / "power.png").exists()


def test_resumed_log_keeps_the_newer_records(tmp_path):
    run = tmp_path / "run"
    logger = JsonlLogger(run / "metrics.jsonl")
    for step in (10, 20, 30, 40):  # the first attempt, killed after step 40
        logger.log("train", {"loss": 1.0}, step, 0.0)
        logger.log("telemetry", {"cpu_util_pct": 1.0}, step, 0.0)
    logger.log("val", {"loss": 1.0, "accuracy": 0.1}, 40, 0.0)
    for step in (30, 40, 50):  # resumed from the checkpoint at step 20
        logger.log("telemetry", {"cpu_util_pct": 2.0}, step, 0.0)
        logger.log("telemetry", {"cpu_util_pct": 2.0}, step, 0.0)  # two samples in one step
        logger.log("train", {"loss": 2.0}, step, 0.0)
    logger.log("val", {"loss": 2.0, "accuracy": 0.2}, 40, 0.0)
    logger.close()
    data = load_run(run)
    assert [(r["step"], r["loss"]) for r in data.split("train")] == [
        (10, 1.0),
        (20, 1.0),
        (30, 2.0),
        (40, 2.0),
        (50, 2.0),
    ]
    assert [r["accuracy"] for r in data.split("val")] == [0.2]
    telemetry = [(r["step"], r["cpu_util_pct"]) for r in data.split("telemetry")]
    assert telemetry == [(10, 1.0), (20, 1.0), (30, 2.0), (40, 2.0), (50, 2.0)]
    # the two samples of a step are one record (the charts' bucket): both are counted
    assert [cell_of(r, "cpu_util_pct") for r in data.split("telemetry")] == [None, None] + [
        (2, 2.0, s, 2.0, s, 2.0) for s in (30, 40, 50)
    ]


def test_torn_lines_nulls_and_no_summary_become_notes(tmp_path):
    run = write_run(tmp_path, confusion=None)
    (run / "summary.json").unlink()
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"time": 1.0, "split": "val", "step": 210, "loss": None}) + "\n")
        fh.write('{"time": 1.0, "split": "tra')  # a crash tore the last line
    page = Page(build_report(run).read_text())
    text = (run / "report.html").read_text()
    assert "1 unreadable line(s) in metrics.jsonl skipped" in text
    assert "no summary.json" in text and "no eval/confusion.json" in text
    assert page.ids["val-loss-final"]["text"] == "non-finite"
    assert page.ids["val-loss-final"]["value"] is None
    assert float(page.ids["val-loss-best"]["value"]) == VAL_LOSS[150]


def test_without_matplotlib_the_tables_still_render(tmp_path, monkeypatch):
    run = write_run(tmp_path)
    build_report(run)
    assert (run / "report" / "loss.png").exists()
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    text = build_report(run).read_text()
    assert html.escape(PLOTS_OFF) in text and "<img" not in text
    assert "val-accuracy-final" in text and "class-balance" in text
    assert not list((run / "report").glob("*.png"))  # stale plots are not left behind


def test_downsample_keeps_shape_peaks_and_gaps():
    x = np.arange(10_000, dtype=float)
    y = 2.0 * x
    y[5000] = 1e9  # a spike
    y[:20] = np.nan  # a gap the size of one bin at least
    xs, ys = downsample(x, y, MAX_POINTS, "mean")
    assert len(xs) <= MAX_POINTS and np.isnan(ys[0])
    assert np.allclose(ys[3:10], 2.0 * xs[3:10])
    _, peaks = downsample(x, y, MAX_POINTS, "max")
    assert np.nanmax(peaks) == 1e9
    short = np.arange(10.0)
    assert downsample(short, short, MAX_POINTS)[0] is short


def test_long_run_reports_quickly(tmp_path, monkeypatch):
    """A long run's report reads its chart buckets (at most 2,000 a series: 20,000 steps
    are 1,251 buckets of 16) and draws each line from at most MAX_POINTS points, whatever
    the run's length: those bounds, not a wall clock, are what keep it quick."""
    from trainforge.observe import report_plots

    drawn: list[tuple[int, int]] = []

    def counted(x, y, max_points, reduce="mean"):
        out = downsample(x, y, max_points, reduce)
        drawn.append((len(x), len(out[0])))
        return out

    monkeypatch.setattr(report_plots, "downsample", counted)
    run = tmp_path / "run"
    logger = JsonlLogger(run / "metrics.jsonl")
    for step in range(1, 20_001):  # 20k logging points and 20k telemetry samples
        logger.log("train", {"loss": 1 / step, "lr": 1e-3, "samples_per_s": 500.0}, step, 0.0)
        logger.log("telemetry", {"process_rss_mib": 900.0, "gpu0_temp_c": 60.0}, step, 0.0)
        if step % 1000 == 0:
            logger.log("val", {"loss": 1 / step, "accuracy": 0.5}, step, 0.0)
    logger.close()
    build_report(run)
    assert (run / "report" / "temperature.png").exists()
    assert any(given == 1_251 for given, _ in drawn), drawn  # the buckets, not 20,000 records
    assert drawn and all(kept <= MAX_POINTS for _, kept in drawn), drawn


def test_missing_folder_or_metrics_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        build_report(tmp_path / "nope")
    for target in (tmp_path / "nope", tmp_path):
        result = run_main("report", str(target))
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr
        assert str(target) in lines[0]
    assert not (tmp_path / "report.html").exists()


def test_digits_run_report_through_the_cli(tmp_path):
    tiny = [
        "model.embedding_dim=32",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.mlp_size=32",
        "training.max_steps=40",
        "logging.logging_steps=10",
        "evaluation.eval_steps=20",
        f"output.dir={tmp_path}",
        "logging.report=false",  # the `report` command below draws it, from nothing
    ]
    args = [part for value in tiny for part in ("--set", value)]
    trained = run_main("train", "config/vit_digits.yaml", *args)
    assert trained.returncode == 0, trained.stderr
    run = tmp_path / "vit_digits"
    result = run_main("report", str(run))
    assert result.returncode == 0, result.stderr
    assert f"report: {run / 'report.html'}" in result.stdout
    pngs = {p.stem: p.read_bytes() for p in (run / "report").glob("*.png")}
    assert {"loss", "accuracy", "lr", "samples_per_s", "data_wait", "memory"} <= set(pngs)
    text = (run / "report.html").read_text()
    page = Page(text)
    embedded = {base64.b64decode(a["src"].split(",", 1)[1]) for _, a in page.attrs if "src" in a}
    assert embedded == set(pngs.values())
    val, train = records(run, "val"), records(run, "train")
    assert [r["step"] for r in val] == [20, 40]
    for key in ("loss", "accuracy"):
        assert float(page.ids[f"val-{key}-final"]["value"]) == val[-1][key]
        assert page.ids[f"val-{key}-final"]["text"] == fmt(key, val[-1][key])
        best = (min if key == "loss" else max)(r[key] for r in val)
        assert float(page.ids[f"val-{key}-best"]["value"]) == best
        assert page.ids[f"val-{key}-best"]["text"] == fmt(key, best)
        assert float(page.ids[f"train-{key}-final"]["value"]) == train[-1][key]
    summary = json.loads((run / "summary.json").read_text())
    assert float(page.ids["summary-best_metric"]["value"]) == max(r["accuracy"] for r in val)
    assert float(page.ids["summary-train_time_s"]["value"]) == summary["train_time_s"]
    assert "unreadable" not in text and "differs from the last validation record" not in text
    # The confusion matrix of the final validation agrees with its logged accuracy.
    assert "confusion" in pngs and "class-balance" in page.ids
    overall = float(page.ids["class-overall"]["value"])
    assert overall == pytest.approx(val[-1]["accuracy"], abs=1e-9)


def test_report_off_the_path_is_written_by_a_detached_child(tmp_path):
    from trainforge.observe.report import build_report_off_the_path

    run = write_run(tmp_path)
    path = build_report_off_the_path(run, background=True)
    assert path == run / "report.html"
    deadline = time.monotonic() + 120
    while not path.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.is_file(), (run / "report.log").read_text()
    assert "<html" in path.read_text().lower()


def test_report_off_a_terminal_is_written_before_returning(tmp_path):
    from trainforge.observe.report import build_report_off_the_path

    run = write_run(tmp_path)
    assert build_report_off_the_path(run).is_file()  # pytest's stdout is no terminal


def _iso(offset_s: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(1_800_000_000 + offset_s, UTC).isoformat(timespec="milliseconds")


# Two nodes of 2 processes, preempted (SIGUSR1) and requeued by Slurm; node2 then lost and
# torchrun's restart going on with node1 alone.
SEGMENTS = [
    {"process_started_at": _iso(0), "first_step_at": _iso(8), "world_size": 4,
     "nodes": [{"host": "node1", "node": 0, "processes": 2},
               {"host": "node2", "node": 1, "processes": 2}],
     "launcher_job": "slurm 77", "from_step": 0, "resume": "start", "stop_signal": "SIGUSR1",
     "stop_signal_at": _iso(100), "stop_saved_at": _iso(101.5), "ended_at": _iso(101.6),
     "end": "SIGUSR1 received"},
    {"process_started_at": _iso(106), "checkpoint_loaded_at": _iso(111), "first_step_at":
     _iso(112.5), "world_size": 4, "recovery_s": 12.5, "launcher_job": "slurm 77",
     "nodes": [{"host": "node1", "node": 0, "processes": 2},
               {"host": "node2", "node": 1, "processes": 2}],
     "from_step": 400, "resume": "exact"},
    {"process_started_at": _iso(150), "first_step_at": _iso(160), "world_size": 2,
     "restart_count": 1, "launcher_job": "slurm 77", "recovery_s": None,
     "nodes": [{"host": "node1", "node": 0, "processes": 2}], "from_step": 500,
     "resume": "continued", "ended_at": _iso(200), "end": "finished"},
]  # fmt: skip


def test_scheduling_timeline_draws_each_segment_per_node_with_stop_and_recovery(tmp_path):
    from trainforge.runfolder import RunFolder

    run = write_run(tmp_path)
    RunFolder(run).write_run({"segments": SEGMENTS})
    text = build_report(run).read_text()
    page = Page(text)
    svgs = [a for tag, a in page.attrs if tag == "svg"]
    assert len(svgs) == 1 and svgs[0]["class"] == "timeline"
    bars = [a for tag, a in page.attrs if tag == "rect" and a.get("class") == "segment"]
    drawn = [(b["data-segment"], b["data-host"], b["data-processes"], b["data-world-size"])
             for b in bars]  # fmt: skip
    assert drawn == [("0", "node1", "2", "4"), ("0", "node2", "2", "4"),
                     ("1", "node1", "2", "4"), ("1", "node2", "2", "4"),
                     ("2", "node1", "2", "2")]  # fmt: skip
    gaps = [a["data-recovery-s"] for tag, a in page.attrs if a.get("class") == "recovery"]
    assert gaps == ["12.5"]  # the lost node's restart has no stop time: no gap drawn
    assert len([a for tag, a in page.attrs if a.get("class") == "stop"]) == 1
    assert "requeued (slurm 77) · recovery 12.5 s" in text
    assert "torchrun restart 1" in text
    assert "3 segments; recovery (stop signal to first step): 12.5 s." in text
    # Each bar spans its segment: the second starts training 112.5 s after the first started.
    starts = [a for tag, a in page.attrs if tag == "rect" and a.get("class") == "startup"]
    begin, end = float(starts[0]["x"]), float(bars[4]["x"]) + float(bars[4]["width"])
    assert (float(bars[2]["x"]) - begin) / (end - begin) == pytest.approx(112.5 / 200, abs=1e-3)


def test_a_run_of_one_segment_has_no_timeline(tmp_path):
    from trainforge.runfolder import RunFolder

    run = write_run(tmp_path)
    RunFolder(run).write_run({"segments": SEGMENTS[:1]})
    assert "<svg" not in build_report(run).read_text()
