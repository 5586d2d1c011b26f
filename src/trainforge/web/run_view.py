"""What a run view adds to the record beyond progress: what the user said about the run
(display name, tags, note, from the web database), its final numbers once it ended (from the
run folder's summary.json), its readable files, and whether its final model can be
downloaded. `AppState.run_view` merges this in; the pages and the API show it."""

from __future__ import annotations

from typing import Any

from trainforge.runfolder import RunFolder
from trainforge.web.db import RunMeta, RunRecord
from trainforge.web.run_files import readable_files, summary_since
from trainforge.web.settings import WebSettings, is_trial_id


def final_numbers(folder: RunFolder, record: RunRecord) -> dict[str, Any] | None:
    """A run that ended: its final validation metrics, best metric, steps and training time
    (summary.json), None while it runs or when this attempt wrote no summary (one left by an
    earlier attempt is not this one's)."""
    if record.active:
        return None
    summary = summary_since(folder, record.started_at)
    if summary is None:
        return None
    metrics = summary.get("final_metrics")
    return {
        "metrics": metrics if isinstance(metrics, dict) else {},
        "best_metric": summary.get("best_metric"),
        "global_step": summary.get("global_step"),
        "train_time_s": summary.get("train_time_s"),
        "mfu": summary.get("mfu"),
        "stop_reason": summary.get("stop_reason"),
    }


def run_extras(
    settings: WebSettings, meta: RunMeta, record: RunRecord, folder: RunFolder
) -> dict[str, Any]:
    trial = is_trial_id(record.id)
    found = readable_files(folder).items()
    files = [] if trial else [name for name, path in found if path.is_file()]
    return {
        "display_name": meta.display_name or record.id,
        "tags": list(meta.tags),
        "note": meta.note,
        "final": final_numbers(folder, record),
        "folder": str(settings.cli_run_folder(record.id).path) if not trial else "",
        "files": files,
    }
