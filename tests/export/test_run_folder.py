"""The report and export find a run's files through `RunFolder`, never through names of their
own: with every run-folder name moved elsewhere, a module that still spelled a name itself
would look in the old place and miss the file."""

from __future__ import annotations

import json
import shutil

from trainforge.export import ExportOptions, find_artifacts
from trainforge.export.pipeline import ExportJob
from trainforge.export.source import resolve_source
from trainforge.observe.report import build_report
from trainforge.observe.report_data import load_run
from trainforge.runfolder import RunFolder

MOVED = {  # RunFolder property: its path under the run folder in this test
    "checkpoints": "ckpt",
    "metrics": "log.jsonl",
    "summary": "final.json",
    "resolved_config": "resolved.yaml",
    "model": "final.safetensors",
    "report": "page.html",
    "report_images": "plots",
    "report_log": "page.log",
    "confusion": "evaluation/cm.json",
    "export_dir": "exports",
}
USUAL = ["checkpoints", "metrics.jsonl", "summary.json", "config.resolved.yaml"]
USUAL += ["model.safetensors", "report.html", "report", "report.log", "eval", "export"]


def test_report_and_export_read_the_run_folder_through_runfolder(digits_run, tmp_path, monkeypatch):
    trained = RunFolder(digits_run)  # read in its usual layout, before the names move
    copied = {name: getattr(trained, name) for name in ("metrics", "summary", "resolved_config")}
    copied["model"], checkpoints = trained.model, trained.checkpoints
    for name, where in MOVED.items():
        monkeypatch.setattr(RunFolder, name, property(lambda self, where=where: self.path / where))
    run = tmp_path / "run"
    folder = RunFolder(run)
    folder.path.mkdir()
    shutil.copytree(checkpoints, folder.checkpoints)
    for name, source in copied.items():
        shutil.copyfile(source, getattr(folder, name))
    folder.confusion.parent.mkdir()
    folder.confusion.write_text(json.dumps({"class_names": ["a", "b"], "matrix": [[3, 1], [0, 4]]}))

    data = load_run(run)
    assert data.records["val"] and data.summary["global_step"] > 0
    assert data.config["task"]["kind"] == "image-classification"
    assert data.checkpoint_meta and data.confusion is not None
    assert build_report(run) == folder.report
    assert "Resolved config" in folder.report.read_text(encoding="utf-8")

    source = resolve_source(run)
    assert (source.weights, source.run_dir) == (folder.model, run)
    assert ExportJob(source, ExportOptions()).out_root == folder.export_dir
    folder.model.unlink()  # falls back to the best checkpoint, its own files named as before
    best = folder.checkpoints / "best_model"
    assert resolve_source(run).weights == best / "model.safetensors"
    assert resolve_source(best).run_dir == run

    artifact = folder.export_dir / "weights"
    artifact.mkdir(parents=True)
    (artifact / "summary.json").write_text(
        json.dumps({"runtime": "r", "artifact": "a", "task": "t"})
    )
    assert [a.folder for a in find_artifacts(run)] == [artifact]
    assert not [name for name in USUAL if (run / name).exists()]
