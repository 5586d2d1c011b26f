"""The run report: RUN/report.html, self-contained, with its PNG plots beside it in RUN/report/.

`build_report(run_dir)` reads the run folder (`report_data`), draws the plots
(`report_plots`, matplotlib on the Agg canvas) and writes one HTML file that embeds every
plot as a base64 data URI, with inline CSS, no scripts and no external addresses, so it can
be mailed or archived alone. Without matplotlib the tables are still written, with a note.

Sections: a summary table (stop reason, time, throughput, MFU, hardware, profile, config
hash), final and best of every metric (each number cell carries its exact value in
`data-value`), the plots, per-class accuracy with the confusion matrix for classification
(classes more than 10 points below the mean per-class accuracy are flagged: the ViT guide
expects it roughly balanced), hardware readings, and notes on anything missing or unreadable.

`report_data` reads and derives, `report_plots` draws, `report_html` writes the page.

At the end of `trainforge train` on a terminal the report is written by a detached child
process (`build_report_off_the_path`), so the prompt comes back while matplotlib draws:
importing matplotlib and drawing the plots take about 1 s of the main job's finish on a
laptop CPU. Off a terminal (the web app, CI, scripts that read report.html next) it is
written before the command returns, as before. `python -m trainforge.observe.report RUN`
is what the child runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from trainforge.observe.report_data import ClassTable, class_table, load_run
from trainforge.observe.report_html import PLOTS_OFF, balance_line, render_html
from trainforge.observe.report_plots import Plot, plot_specs, render
from trainforge.runfolder import RunFolder
from trainforge.storage import storage_error


@dataclass
class Built:
    path: Path
    plots: list[Plot] | None  # None: matplotlib missing
    classes: ClassTable | None


def build_report(run_dir: Path) -> Path:
    """Write RUN/report.html and RUN/report/*.png; return the HTML path.

    Raises UserError when the run folder or its metrics.jsonl is missing or the report
    cannot be written; anything else missing or unreadable becomes a note in the report.
    """
    return _build(Path(run_dir)).path


def build_report_off_the_path(run_dir: Path, *, background: bool | None = None) -> Path:
    """The report's path, written now or (background, default: stdout is a terminal) by a
    detached child whose output goes to RUN/report.log; the page appears when it is done."""
    run_dir = Path(run_dir)
    if background is None:
        background = sys.stdout.isatty()
    if not background:
        return build_report(run_dir)
    folder = RunFolder(run_dir)
    with folder.report_log.open("wb") as log:
        subprocess.Popen(
            [sys.executable, "-m", "trainforge.observe.report", str(run_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl+C at the prompt does not reach it
        )
    return folder.report


def _build(run_dir: Path) -> Built:
    data = load_run(run_dir)
    plots = render(plot_specs(data), data.confusion)
    classes = class_table(data.confusion) if data.confusion is not None else None
    folder = RunFolder(run_dir)
    path = folder.report
    page = render_html(data, plots, classes)
    tmp = path.with_name(".report.html.tmp")
    try:
        _write_pngs(folder.report_images, plots or [])
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        needed = len(page.encode("utf-8")) + sum(len(p.png) for p in plots or [])
        raise storage_error(
            "the report",
            path,
            error,
            needed,
            "checkpoints and metrics are not affected; run `trainforge report RUN` again "
            "when there is room",
        ) from None
    return Built(path, plots, classes)


def _write_pngs(folder: Path, plots: list[Plot]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = {f"{plot.name}.png" for plot in plots}
    for old in folder.glob("*.png"):
        if old.name not in names:  # a plot from an earlier report that no longer applies
            old.unlink()
    for plot in plots:
        (folder / f"{plot.name}.png").write_bytes(plot.png)


def report_command(run_dir: Path) -> None:
    """`trainforge report RUN_DIR`: build the report and say where it is."""
    built = _build(Path(run_dir))
    if built.plots is None:
        print(f"report: {built.path} ({PLOTS_OFF})")
    else:
        images = RunFolder(Path(run_dir)).report_images
        print(f"report: {built.path} ({len(built.plots)} plots in {images})")
    if built.classes is not None and built.classes.flagged:
        print(balance_line(built.classes))


if __name__ == "__main__":
    report_command(Path(sys.argv[1]))
