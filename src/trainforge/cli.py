"""The `trainforge` command: thin subcommands that parse, call the library, print, exit.

User errors (`trainforge.errors.UserError`) become one line on stderr and exit code 2.
Heavy imports (torch) happen inside the commands that need them, so `validate`,
`config show`, `profiles` and `detect` answer in a fraction of a second.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainforge import __version__
from trainforge.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="One training pipeline for Jetson, workstation GPUs, DGX Spark, clusters and CPUs.",
)
config_app = typer.Typer(no_args_is_help=True, help="Inspect resolved run configs.")
profiles_app = typer.Typer(help="List and show the built-in hardware profiles.")
app.add_typer(config_app, name="config")
app.add_typer(profiles_app, name="profiles")

ProfileOpt = Annotated[
    str | None, typer.Option("--profile", help="Hardware profile name, or auto (default).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override any field: --set training.seed=1 (repeatable)."),
]


def _version(value: bool) -> None:
    if value:
        print(f"trainforge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    pass


@app.command()
def train(
    config: Annotated[Path, typer.Argument(help="Run config file (.yaml or .json).")],
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    batch_size: Annotated[
        str | None, typer.Option("--batch_size", help="Per-device batch, or auto.")
    ] = None,
    learning_rate: Annotated[float | None, typer.Option("--learning_rate")] = None,
    max_epochs: Annotated[float | None, typer.Option("--max_epochs")] = None,
    max_training_hours: Annotated[float | None, typer.Option("--max_training_hours")] = None,
    embedding_dim: Annotated[int | None, typer.Option("--embedding_dim")] = None,
    num_layers: Annotated[int | None, typer.Option("--num_layers")] = None,
    num_heads: Annotated[int | None, typer.Option("--num_heads")] = None,
    mlp_size: Annotated[int | None, typer.Option("--mlp_size")] = None,
    resume_from: Annotated[
        str | None,
        typer.Option("--resume_from", "--resume", help="Checkpoint folder, or auto (newest)."),
    ] = None,
    base_model: Annotated[
        str | None, typer.Option("--base-model", help="causal-lm: base model folder (models/NAME).")
    ] = None,
    output_name: Annotated[
        str | None, typer.Option("--output-name", help="causal-lm: write models/OUTPUT_NAME.")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing run folder / output model.")
    ] = False,
) -> None:
    """Train: validate the config, detect the hardware, then run the training loop."""
    import json

    from trainforge.config import validate
    from trainforge.hardware import detect

    flags = {
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "max_epochs": max_epochs,
        "max_training_hours": max_training_hours,
        "embedding_dim": embedding_dim,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "mlp_size": mlp_size,
    }
    platform = detect()
    # The Jetson guide's flags; explicit --set values given after them still win.
    quoted = json.dumps  # a YAML string whatever the name looks like (1e5, yes, ...)
    named = [f"model.model_name_or_path={quoted(base_model)}"] if base_model else []
    if output_name:
        name = quoted(output_name)
        named += [f"output.model_name={name}", f"output.run_name={name}"]
    named += ["output.overwrite=true"] if overwrite else []
    resolved = validate(
        config, platform=platform, profile=profile, overrides=named + (set_ or []), flags=flags
    )
    from trainforge.engine.run import train as run_training

    summary = run_training(resolved, platform, resume_from=resume_from)
    _print_summary(summary)
    if summary.interrupted:
        raise typer.Exit(summary.exit_code)


def _print_summary(summary) -> None:
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 speaks for the job
        return
    run = summary.run_dir
    metrics = summary.final_metrics
    print(
        f"done: {summary.stop_reason} after {summary.global_step} steps "
        f"in {summary.train_time_s:.1f} s of training"
    )
    if "accuracy" in metrics:
        print(f"validation accuracy {metrics['accuracy'] * 100:.2f}%  loss {metrics['loss']:.4f}")
    print(f"checkpoints: {run / 'checkpoints'}")
    print(f"TensorBoard: tensorboard --logdir {run / 'tensorboard'}")
    print(f"metrics:     {run / 'metrics.jsonl'}")
    if (run / "model.safetensors").exists():
        print(f"final model: {run / 'model.safetensors'}")


@app.command("validate")
def validate_cmd(
    files: Annotated[list[Path], typer.Argument(help="Run config files to check.")],
    profile: ProfileOpt = None,
) -> None:
    """Check run configs without loading data: OK per valid file, every error otherwise."""
    from trainforge.config import ConfigError, validate
    from trainforge.hardware import detect

    platform = detect()
    failed = False
    for path in files:
        try:
            validate(path, platform=platform, profile=profile)
            print(f"OK {path}")
        except ConfigError as err:
            failed = True
            for line in err.lines:
                print(line, file=sys.stderr)
        except UserError as err:
            failed = True
            print(err.line(), file=sys.stderr)
    if failed:
        raise typer.Exit(2)


@config_app.command("show")
def config_show(
    file: Annotated[Path, typer.Argument(help="Run config file.")],
    profile: ProfileOpt = None,
    set_: SetOpt = None,
) -> None:
    """Print the resolved config and where every value came from."""
    from trainforge.config import get_dotted, validate

    resolved = validate(file, profile=profile, overrides=set_ or [])
    print(f"# profile: {resolved.profile.name} ({resolved.profile_reason})")
    width = max(len(k) for k in resolved.sources)
    for path, source in resolved.sources.items():
        value = get_dotted(resolved.config, path)
        shown = "null" if value is None else value
        print(f"{path:<{width}}  {shown!s:<24}  # {source}")


@profiles_app.callback(invoke_without_command=True)
def profiles_list(ctx: typer.Context) -> None:
    """List the built-in hardware profiles."""
    if ctx.invoked_subcommand is not None:
        return
    from trainforge.profiles import list_profiles, load_profile

    for name in list_profiles():
        print(f"{name:<18} {load_profile(name).description}")


@profiles_app.command("show")
def profiles_show(name: Annotated[str, typer.Argument(help="Profile name.")]) -> None:
    """Print one profile file, with the comments that name its sources."""
    from trainforge.profiles import load_profile

    print(load_profile(name).source_text(), end="")


@profiles_app.command("template")
def profiles_template(
    name: Annotated[str, typer.Argument(help="Profile name (or a profile file).")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Print a complete, commented run config for a profile: customise, validate, train."""
    from trainforge.profiles.template import render_template

    text = render_template(name)
    if output is None:
        print(text, end="")
        return
    if output.exists():
        raise UserError(f"{output} already exists", "pick another -o FILE or remove it first")
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output}; check it with: trainforge validate {output}")


@app.command()
def detect() -> None:
    """Print the detected platform and the profile `auto` would pick, and why."""
    from trainforge.hardware import detect as detect_platform
    from trainforge.hardware import pick_profile

    platform = detect_platform()
    for line in platform.describe():
        print(line)
    name, reason = pick_profile(platform)
    print(f"profile (auto): {name} — {reason}")


@app.command(
    "jetson-wheel",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def jetson_wheel(
    ctx: typer.Context,
    jetpack: Annotated[
        str | None, typer.Option("--jetpack", help="JetPack version X.Y (default: detect).")
    ] = None,
) -> None:
    """Print the pip commands for NVIDIA's PyTorch wheels matching this Jetson's JetPack."""
    from trainforge.hardware.jetson_wheels import main as wheel_main

    argv = (["--jetpack", jetpack] if jetpack else []) + list(ctx.args)
    code = wheel_main(argv)
    if code:
        raise typer.Exit(code)


@app.command()
def doctor(
    config: Annotated[
        Path | None, typer.Argument(help="Run config to check for (default: built-in defaults).")
    ] = None,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    fixture: Annotated[
        Path | None, typer.Option("--fixture", hidden=True, help="Replay a recorded machine.")
    ] = None,
) -> None:
    """Check this machine for training: each finding with its fix; exit 1 with findings."""
    from trainforge.hardware.doctor import main as doctor_main

    code = doctor_main(config, profile=profile, overrides=set_ or [], fixture=fixture)
    if code:
        raise typer.Exit(code)


@app.command(
    "models",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def models(ctx: typer.Context) -> None:
    """Hugging Face model folders: `models list`, `models init NAME --arch gpt2|llama ...`."""
    from trainforge.models.cli import main as models_main

    code = models_main(list(ctx.args))
    if code:
        raise typer.Exit(code)


_FORWARD = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("export", context_settings=_FORWARD, add_help_option=False)
def export_cmd(ctx: typer.Context) -> None:
    """Export a run: `export RUN_OR_CHECKPOINT --format onnx|int8|pruned|safetensors`."""
    from trainforge.export.cli import export_main

    code = export_main(list(ctx.args))
    if code:
        raise typer.Exit(code)


@app.command("bench-infer", context_settings=_FORWARD, add_help_option=False)
def bench_infer_cmd(ctx: typer.Context) -> None:
    """Inference latency of export artifacts side by side: `bench-infer ARTIFACT...`."""
    from trainforge.export.cli import bench_main

    code = bench_main(list(ctx.args))
    if code:
        raise typer.Exit(code)


@app.command("slurm", context_settings=_FORWARD, add_help_option=False)
def slurm_cmd(ctx: typer.Context) -> None:
    """Slurm batch script: `slurm CONFIG --nodes N --gpus-per-node G --time HH:MM:SS [--submit]`."""
    from trainforge.launch.cli import slurm_main

    code = slurm_main(list(ctx.args))
    if code:
        raise typer.Exit(code)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="Run folder, e.g. runs/vit_digits.")],
) -> None:
    """Write RUN_DIR/report.html (plots, per-class accuracy, summary) and RUN_DIR/report/*.png."""
    from trainforge.observe.report import report_command

    report_command(run_dir)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="Access token every request must carry (or TRAINFORGE_WEB_TOKEN); needed "
            "for a non-loopback --host.",
        ),
    ] = None,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="SQLite run history (default runs/.trainforge-web/runs.db)."),
    ] = None,
    runs_dir: Annotated[str, typer.Option("--runs-dir", help="Parent of run folders.")] = "runs",
    models_dir: Annotated[
        str, typer.Option("--models-dir", help="Folder of Hugging Face model folders.")
    ] = "models",
    max_parallel: Annotated[
        int | None,
        typer.Option(
            "--max-parallel",
            min=1,
            help="Trainings run at once (default 1, or TRAINFORGE_WEB_MAX_PARALLEL); the rest "
            "queue.",
        ),
    ] = None,
    fixture: Annotated[
        Path | None, typer.Option("--fixture", hidden=True, help="Replay a recorded machine.")
    ] = None,
) -> None:
    """Web app: launch, watch and stop training runs from a browser."""
    from trainforge.web.serve import serve as serve_app

    serve_app(
        host,
        port,
        token,
        db=db,
        runs_dir=runs_dir,
        models_dir=models_dir,
        fixture=fixture,
        max_parallel_runs=max_parallel,
    )


def main() -> None:
    from trainforge.observe.quiet import install as quiet_console

    quiet_console()  # third-party noise off before any library is imported
    try:
        app()
    except UserError as err:
        print(err.line(), file=sys.stderr)
        sys.exit(2)
