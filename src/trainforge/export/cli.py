"""`trainforge export` and `trainforge bench-infer`: their options, then `commands.py`.

The top-level command forwards its arguments here (`export_main` / `bench_main`), so
importing the `trainforge` command never imports torch. Usage errors are one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainforge.registry import EXPORT_FORMATS
from trainforge.subapp import run_subapp

FORMAT_CHOICES = ", ".join(EXPORT_FORMATS.names())

export_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
bench_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


ExporterOpt = Annotated[
    str,
    typer.Option(
        "--exporter",
        help="torch.onnx exporter: auto (dynamo from opset 18, torchscript below), dynamo or "
        "torchscript.",
    ),
]
InputNameOpt = Annotated[
    str | None, typer.Option("--input-name", help="ONNX input tensor name (default images).")
]
OutputNameOpt = Annotated[
    str | None, typer.Option("--output-name", help="ONNX output tensor name (default logits).")
]


LatencyOpt = Annotated[
    int, typer.Option("--latency-runs", help="Timed batch-1 calls for the summary.")
]
OptionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        "-O",
        help="A format's own option as KEY=VALUE (repeatable), e.g. --option opset=17; the "
        "named flags here are the built-ins' options; each format's options: "
        "docs/configuration.md, 'Export format options'.",
    ),
]


@export_app.command()
def export_command(
    source: Annotated[
        Path, typer.Argument(help="Run folder (runs/NAME) or checkpoint folder to export.")
    ],
    formats: Annotated[
        list[str] | None,
        typer.Option("--format", "-f", help=f"{FORMAT_CHOICES} or all (repeatable)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Parent folder (default RUN/export).")
    ] = None,
    opset: Annotated[
        int, typer.Option("--opset", help="ONNX opset, 11 to 23 (Jetson JetPack 5: 17).")
    ] = 18,
    exporter: ExporterOpt = "auto",
    input_name: InputNameOpt = None,
    output_name: OutputNameOpt = None,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Max |ONNX - PyTorch| on validation samples.")
    ] = 1e-4,
    calibration_batches: Annotated[
        int, typer.Option("--calibration-batches", help="Training batches for static INT8.")
    ] = 8,
    sparsity: Annotated[
        float, typer.Option("--sparsity", help="pruned: share of weights set to zero.")
    ] = 0.5,
    finetune_epochs: Annotated[
        float, typer.Option("--finetune-epochs", help="pruned: fine-tuning epochs (0: none).")
    ] = 0.0,
    finetune_lr: Annotated[
        float | None,
        typer.Option("--finetune-lr", help="pruned: peak learning rate (default: run's / 10)."),
    ] = None,
    latency_runs: LatencyOpt = 100,
    option: OptionOpt = None,
) -> None:
    """Export a trained run: ONNX, INT8, pruned or plain safetensors, with measured cost."""
    from trainforge.export.options import (
        ExportOptions,
        check_format_options,
        check_formats,
        check_options,
        check_source_exists,
        parse_option,
    )

    options = ExportOptions(
        output=output, opset=opset, exporter=exporter, input_name=input_name,
        output_name=output_name, tolerance=tolerance, calibration_batches=calibration_batches,
        sparsity=sparsity, finetune_epochs=finetune_epochs, finetune_lr=finetune_lr,
        latency_runs=max(1, latency_runs), extra=dict(parse_option(o) for o in option or []),
    )  # fmt: skip
    wanted = check_formats(formats or [], source)
    check_options(options)
    check_format_options(options, wanted)
    check_source_exists(source)
    from trainforge.export.commands import run_export

    run_export(source, wanted, options)


@bench_app.command()
def bench_command(
    artifacts: Annotated[
        list[Path],
        typer.Argument(help="Artifact folders, RUN/export folders or run folders."),
    ],
    batch_size: Annotated[
        int, typer.Option("--batch-size", "-b", help="Batch N, timed next to batch 1.")
    ] = 32,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed calls first.")] = 20,
    runs: Annotated[int, typer.Option("--runs", help="Timed calls per cell.")] = 200,
    threads: Annotated[
        int | None, typer.Option("--threads", help="CPU threads for torch and onnxruntime.")
    ] = None,
    device: Annotated[
        list[str] | None,
        typer.Option(
            "--device", help="cpu or cuda (repeatable; default cpu, plus cuda if present)."
        ),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the results to this JSON file.")
    ] = None,
) -> None:
    """p50/p99 latency and throughput of export artifacts at batch 1 and batch N."""
    from trainforge.export.commands import run_bench

    run_bench(
        artifacts,
        batch_size=batch_size,
        warmup=warmup,
        runs=runs,
        threads=threads,
        devices=device,
        json_path=json_path,
    )


def export_main(argv: list[str]) -> int:
    """Run `trainforge export ARGV`; UserError propagates to the top-level handler."""
    return run_subapp(export_app, argv, "trainforge export")


def bench_main(argv: list[str]) -> int:
    """Run `trainforge bench-infer ARGV`."""
    return run_subapp(bench_app, argv, "trainforge bench-infer")
