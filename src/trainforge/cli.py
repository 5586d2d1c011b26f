"""The `trainforge` command: thin subcommands that parse, call the library, print, exit.

User errors (`trainforge.errors.UserError`) become one line on stderr and exit code 2.
Heavy imports (torch) happen inside the commands that need them, so `validate`,
`config show`, `profiles` and `detect` answer in a fraction of a second.
"""

from __future__ import annotations

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
        int | None, typer.Option("--batch_size", help="Per-device batch.")
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
) -> None:
    """Train: validate the config, detect the hardware, then run the training loop."""
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
    resolved = validate(
        config, platform=platform, profile=profile, overrides=set_ or [], flags=flags
    )
    from trainforge.engine.run import train as run_training

    summary = run_training(resolved, platform, resume_from=resume_from)
    _print_summary(summary)
    if summary.interrupted:
        raise typer.Exit(summary.exit_code)


def _print_summary(summary) -> None:
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


def main() -> None:
    try:
        app()
    except UserError as err:
        print(err.line(), file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
