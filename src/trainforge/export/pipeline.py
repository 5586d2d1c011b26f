"""One `trainforge export` call: source -> reference numbers -> one writer per format.

Each format's writer is its `trainforge.registry.EXPORT_FORMATS` entry's (or the task kind's
own `write_<format>`); what a writer receives, the `ExportJob`, is `trainforge.export.job`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainforge.errors import UserError
from trainforge.export.job import ExportJob, Reference, Result
from trainforge.export.kinds import formats_of, writer_for
from trainforge.export.options import (
    ExportOptions,
    check_format_options,
    check_formats,
    check_options,
)
from trainforge.export.source import resolve_source
from trainforge.registry import EXPORT_FORMATS

__all__ = ["ExportJob", "Reference", "Result", "export"]


def export(
    path: Path,
    formats: list[str],
    options: ExportOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Write one artifact folder per format (INT8 writes a PyTorch and an ONNX one).

    `progress` receives a line as each format starts (the command prints it)."""
    options = options or ExportOptions()
    wanted = check_formats(formats)
    check_options(options)
    check_format_options(options, wanted)
    source = resolve_source(path)
    job = ExportJob(source, options)
    available = formats_of(job.kind)
    for fmt in wanted:
        if fmt not in available:
            raise UserError(
                f"format {fmt} is not available for task {job.kind.kind}",
                f"use one of: {', '.join(available)}",
            )
    results: list[Result] = []
    for number, fmt in enumerate(wanted, 1):
        if progress is not None:
            progress(f"[{number}/{len(wanted)}] {fmt}: writing {job.out_root / fmt}")
        results.extend(writer_for(job.kind, fmt, EXPORT_FORMATS.get(fmt).writer())(job))
    return results
