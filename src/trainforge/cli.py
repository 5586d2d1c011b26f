"""The `trainforge` command: thin subcommands that parse, call the library, print, exit.

User errors (`trainforge.errors.UserError`) become one line on stderr and exit code 2.
Heavy imports (torch) happen inside the commands that need them, so `validate`,
`config show`, `profiles` and `detect` answer in a fraction of a second.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from trainforge import __version__
from trainforge.errors import UserError
from trainforge.targets.forward import send_sweep_to, send_to, target_of


def _flags_show_no_value_type() -> None:
    """Typer 0.29 prints a flag's type in the help (`--help <bool>`, `--version <bool>`), as
    if it took a value. A flag takes none: its type column stays empty, as in click's help."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_value_type()
app = typer.Typer(
    add_completion=True,  # Typer's --install-completion / --show-completion (bash, zsh, fish)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="One training pipeline for Jetson, workstation GPUs, DGX Spark, clusters and CPUs.",
)
config_app = typer.Typer(no_args_is_help=True, help="Inspect resolved run configs.")
profiles_app = typer.Typer(help="List and show the built-in hardware profiles.")
recipes_app = typer.Typer(help="The packaged run configs: list them, copy one to edit.")
app.add_typer(config_app, name="config")
app.add_typer(profiles_app, name="profiles")
app.add_typer(recipes_app, name="recipes")

ProfileOpt = Annotated[
    str | None, typer.Option("--profile", help="Hardware profile name, or auto (default).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override any field: --set training.seed=1 (repeatable)."),
]


def _version(value: bool) -> None:
    if value:
        print(f"trainforge {installed_version()}")
        raise typer.Exit()


def installed_version() -> str:
    """The version pip installed (the package metadata); `__version__`, which the metadata
    is built from, when trainforge runs from a source tree that was never installed."""
    from importlib import metadata

    try:
        return metadata.version("trainforge")
    except metadata.PackageNotFoundError:
        return __version__


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    pass


_FORWARD = {"allow_extra_args": True, "ignore_unknown_options": True}


def _exit_with(code: int) -> None:
    """End the command with a subcommand's nonzero exit code; return when it is 0."""
    if code:
        raise typer.Exit(code)


@app.command("train", context_settings=_FORWARD, add_help_option=False)
def train(ctx: typer.Context) -> None:
    """Train: `train CONFIG [FLAGS]` or `train --resume runs/NAME [FLAGS]` (--help: flags)."""

    target, words = target_of(list(ctx.args))
    if target is not None:
        # A cluster target: the train flags and the Slurm options (--nodes, --gpus-per-node,
        # --time ...) go to the job, as `trainforge slurm CONFIG --target NAME --submit`.
        from trainforge.launch.cli import slurm_main

        send = send_to(*target)
        # Usage errors name `trainforge slurm`, whose --help lists these options.
        _exit_with(slurm_main([*words, "--submit"], send=send))
        return
    ctx.args[:] = words
    args = _run_args(ctx, "train")
    if args is None:
        return
    _one_config(args, "train")
    from trainforge.hardware import detect
    from trainforge.parallel import env_ranks

    platform = detect()
    ranks = env_ranks(os.environ)
    resolved, resume = _resolve(args, platform, ranks[1] if ranks else 1)
    _refuse_before_slow_work(resolved, resume)
    from trainforge.run.outputs import print_summary
    from trainforge.train import train as run_training

    summary = run_training(resolved, platform, resume_from=resume)
    print_summary(summary)
    if summary.exit_code:
        raise typer.Exit(summary.exit_code)


def _refuse_before_slow_work(resolved, resume: str | None) -> None:
    """A taken run folder or output model, refused before torch loads (`run.preflight`)."""
    from trainforge.run.preflight import check_fresh_run
    from trainforge.run.resume import run_folder_for

    check_fresh_run(resolved.config, run_folder_for(resolved), resume)


def _check_config_paths(resolved) -> None:
    """The paths the config names, checked as `train` checks them first (`run.preflight`):
    a missing base model or a taken output model is not OK."""
    from trainforge.run.preflight import check_config_paths
    from trainforge.run.resume import run_folder_for

    check_config_paths(resolved.config, run_folder_for(resolved))


def _run_args(ctx: typer.Context, command: str):
    """The flags of `train` / `validate` / `config show`; None after printing `--help`."""
    from trainforge.config import flags as run_flags

    args = run_flags.parse(list(ctx.args))
    if args.help:
        print(run_flags.help_text(command))
        return None
    return args


def _one_config(args, command: str) -> None:
    if args.files:
        raise UserError(
            f"{command}: unexpected argument {str(args.files[0])!r} (one run config at most)",
            "flags take the form --name VALUE; see `trainforge train --help`",
        )


def _resolve(args, platform, world_size: int, **check: object):
    """(the resolved run, what to resume from): see `trainforge.run.resume.resolve_run`."""
    from trainforge.run.resume import resolve_run

    return resolve_run(args, platform, world_size, **check)


@app.command("validate", context_settings=_FORWARD, add_help_option=False)
def validate_cmd(ctx: typer.Context) -> None:
    """Check run configs without loading data: `validate FILE... [--profile NAME] [FLAGS]`."""
    from trainforge.config import ConfigError
    from trainforge.hardware import detect

    args = _run_args(ctx, "validate")
    if args is None:
        return
    files = ([args.config] if args.config else []) + args.files
    if not files:
        raise UserError("no run config given", "trainforge validate FILE...")
    platform = detect()
    failed = False
    for path in files:
        args.config = path
        try:
            resolved, _ = _resolve(args, platform, args.world_size or 1, for_profile=True)
            _check_config_paths(resolved)
            print(f"OK {path}" + _here(args, platform, resolved))
        except ConfigError as err:
            failed = True
            for line in err.lines:
                print(line, file=sys.stderr)
        except UserError as err:
            failed = True
            print(err.line(), file=sys.stderr)
    if failed:
        raise typer.Exit(2)


def _here(args, platform, resolved) -> str:
    """After `OK PATH`: nothing when the config was judged for this machine; else whose
    hardware it was judged for, and what `train` would refuse here (a template of the
    hpc-a100 profile validates for its A100s, and fp16 does not train on a CPU)."""
    from trainforge.config import ConfigError

    if resolved.profile_reason.startswith("auto"):
        return ""
    try:
        _resolve(args, platform, args.world_size or 1, for_profile=False)
    except ConfigError as err:
        # Each line less its file name and the hint to validate for a profile (done here).
        said = [line.split(": ", 1)[-1].split("; `trainforge validate", 1)[0] for line in err.lines]
    except UserError as err:
        said = [err.line()]
    else:
        return ""
    return f" for the {resolved.profile.name} profile's hardware; not on this machine: " + (
        "; ".join(said)
    )


def _shown(value: object) -> str:
    """A value on one line: null, or text with newlines and tabs written as \\n and \\t."""
    if value is None:
        return "null"
    text = str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


@config_app.command("show", context_settings=_FORWARD, add_help_option=False)
def config_show(ctx: typer.Context) -> None:
    """Print the resolved config and plan, and where every value came from: `config show
    FILE [--profile NAME] [--world_size N] [every flag train takes]`."""
    from trainforge.config import ConfigError, get_dotted
    from trainforge.hardware import detect

    args = _run_args(ctx, "config show")
    if args is None:
        return
    _one_config(args, "config show")
    try:
        resolved, _ = _resolve(args, detect(), args.world_size or 1, for_profile=True)
    except ConfigError as err:
        for line in err.lines:
            print(line, file=sys.stderr)
        raise typer.Exit(2) from None
    print(f"# profile: {resolved.profile.name} ({resolved.profile_reason})")
    for line in resolved.rules:
        print(f"# rule: {line}")
    for line in resolved.notes:
        print(f"# {line}")
    width = max(len(k) for k in resolved.sources)
    for path, source in resolved.sources.items():
        value = get_dotted(resolved.config, path)
        print(f"{path:<{width}}  {_shown(value):<24}  # {source}")


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
    from trainforge.config.template import render_template

    text = render_template(name)
    if output is None:
        print(text, end="")
        return
    if output.exists():
        raise UserError(f"{output} already exists", "pick another -o FILE or remove it first")
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output}; check it with: trainforge validate {output}")


@recipes_app.callback(invoke_without_command=True)
def recipes_list(ctx: typer.Context) -> None:
    """List the packaged recipes: what each trains, its data, a typical time. Train one with
    `trainforge train NAME`."""
    if ctx.invoked_subcommand is not None:
        return
    from trainforge.recipes import listing

    for line in listing():
        print(line)


@recipes_app.command("copy")
def recipes_copy(
    name: Annotated[str, typer.Argument(help="Recipe name (see `trainforge recipes`).")],
    folder: Annotated[Path, typer.Argument(help="Folder to write into.")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files already there.")] = False,
) -> None:
    """Write a recipe's run config and the data files it names into FOLDER, to edit."""
    from trainforge import recipes

    recipe = recipes.find(name)
    written = recipes.copy(recipe, folder, force=force)
    data = f" and {len(written) - 1} data file(s) under {folder}" if len(written) > 1 else ""
    print(f"wrote {written[0]}{data}; train it with: {recipes.train_command(recipe, folder)}")


@app.command()
def detect(
    peak: Annotated[
        bool,
        typer.Option(
            "--peak", help="Also print the device's measured dense matmul peak (cached) for MFU."
        ),
    ] = False,
    precision: Annotated[
        str, typer.Option("--precision", help="Peak precision: auto, fp32, bf16 or fp16.")
    ] = "auto",
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Measure again instead of reading the cache.")
    ] = False,
) -> None:
    """Print the detected platform and the profile `auto` would pick, and why."""
    from trainforge.hardware import detect as detect_platform
    from trainforge.hardware import pick_profile

    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise UserError(f"--precision {precision}: unknown", "use auto, fp32, bf16 or fp16")
    platform = detect_platform()
    for line in platform.describe():
        print(line)
    name, reason = pick_profile(platform)
    print(f"profile (auto): {name} — {reason}")
    if peak:
        from trainforge.hardware.peak_probe import peak_lines

        for line in peak_lines(platform, precision, refresh=refresh):
            print(line)


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
    _exit_with(wheel_main(argv))


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
    from trainforge.doctor import main as doctor_main

    _exit_with(doctor_main(config, profile=profile, overrides=set_ or [], fixture=fixture))


@app.command()
def verify(
    target: Annotated[str, typer.Argument(help="A run folder or one of its checkpoints.")],
) -> None:
    """Check every checkpoint of a run against its manifest; exit 1 when one is damaged."""
    from trainforge.run.verify import verify_main

    _exit_with(verify_main(target))


@app.command("evaluate")
def evaluate_cmd(
    run: Annotated[Path, typer.Argument(help="A run folder (runs/NAME) or a checkpoint.")],
    checkpoint: Annotated[
        str | None,
        typer.Option(help="A checkpoint of the run (best_model, checkpoint-500) or a folder."),
    ] = None,
    file: Annotated[
        Path | None, typer.Option(help="Score this TSV/CSV/JSONL file instead of the splits.")
    ] = None,
    split: Annotated[str, typer.Option(help="val, test or all (the splits the run has).")] = "all",
    batch_size: Annotated[
        int | None, typer.Option("--batch_size", help="Evaluation batch size.")
    ] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or mps.")] = None,
    num_threads: Annotated[int | None, typer.Option("--num_threads", help="CPU threads.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write JSON here.")] = None,
) -> None:
    """Score a run's model (final, else best, else newest checkpoint) on its splits or a file."""
    from trainforge import evaluate as ev

    if split not in ("val", "test", "all"):
        raise UserError(f"--split {split}: unknown split", "use val, test or all")
    request = ev.Request(
        run, checkpoint=checkpoint, file=file, batch_size=batch_size, device=device,
        num_threads=num_threads, splits=None if split == "all" else (split,),
    )  # fmt: skip
    json_out = json_out.resolve() if json_out is not None else None  # before any chdir
    result = ev.evaluate(request)
    if json_out is not None:
        ev.write_json(result, json_out)


@app.command("generate")
def generate_cmd(
    model: Annotated[
        list[str],
        typer.Argument(
            metavar="MODEL_OR_RUN",
            help="Model folder, models/NAME, runs/NAME (several: side by side).",
        ),
    ],
    prompt: Annotated[
        list[str] | None, typer.Option(metavar="TEXT", help="A prompt (repeatable).")
    ] = None,
    prompt_file: Annotated[
        Path | None, typer.Option(metavar="FILE", help="One prompt per line.")
    ] = None,
    chat: Annotated[bool, typer.Option("--chat", help="Talk on stdin, keeping the turns.")] = False,
    compare: Annotated[
        list[str] | None,
        typer.Option(metavar="OTHER", help="Also ask this model (base: the recorded base)."),
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option("--max_new_tokens", metavar="N", help="Tokens at most.")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(metavar="T", help="Sample (default: greedy).")
    ] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", metavar="P", help="Top-p.")] = None,
    seed: Annotated[int | None, typer.Option(metavar="N", help="Seed for sampling.")] = None,
    device: Annotated[str, typer.Option(metavar="DEVICE", help="cpu, cuda or mps.")] = "cpu",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Ask a causal LM (its chat template, its stop tokens); base and tuned side by side."""
    from trainforge.generate import command as gen
    from trainforge.generate.sources import Settings

    settings = Settings(max_new_tokens, temperature, top_p, seed, device)
    gen.run(gen.Request(model, prompt or [], prompt_file, compare or [], chat, json_out,
                        settings=settings))  # fmt: skip


@dataclass(frozen=True)
class Forwarded:
    """A command whose words go, as given, to its module's own parser: `run` is
    "module:function" taking the words (and `send=` where `send` is set: the function that
    hands the rendered job to `--target NAME`), imported only when the command runs."""

    name: str
    run: str
    help: str
    send: Callable[[str, Path | None], Any] | None = None


# The forwarding commands, in one table (`trainforge --help` lists them in this order).
FORWARDED = (
    Forwarded("models", "trainforge.models.cli:main",
              "Hugging Face model folders: `models list`, `models init NAME --arch gpt2|llama "
              "...`."),
    Forwarded("targets", "trainforge.targets.cli:main",
              "Where runs execute: `targets list`, `targets add NAME --host H`, `targets check "
              "NAME`."),
    Forwarded("jobs", "trainforge.targets.jobs_cli:main",
              "Runs on targets: `jobs [--json]`, `jobs submit|logs|stop|resume|pull ...`."),
    Forwarded("render", "trainforge.launch.render_cli:main",
              "Render a run for SkyPilot or Kubeflow: `render skypilot|kubeflow CONFIG --nodes "
              "N`."),
    Forwarded("export", "trainforge.export.cli:export_main",
              "Export a run: `export RUN_OR_CHECKPOINT --format onnx|int8|pruned|safetensors`."),
    Forwarded("bench-infer", "trainforge.export.cli:bench_main",
              "Inference latency of export artifacts side by side: `bench-infer ARTIFACT...`."),
    Forwarded("slurm", "trainforge.launch.cli:slurm_main",
              "Slurm batch script: `slurm CONFIG --nodes N --gpus-per-node G --time HH:MM:SS "
              "[--submit] [--target NAME] [train flags]`.", send_to),
    Forwarded("sweep", "trainforge.sweep.cli:sweep_main",
              "Hyperparameter sweep: `sweep CONFIG --space SPACE.yaml --trials N "
              "TRAIN_FLAGS...` [--slurm --time T --submit [--target NAME]]; `sweep status "
              "runs/NAME` (--help: options).", send_sweep_to),
)  # fmt: skip


def _forward(entry: Forwarded) -> None:
    def command(ctx: typer.Context) -> None:
        from trainforge.registry import load_object

        run = load_object(entry.run)
        words = list(ctx.args)
        if entry.send is None:
            _exit_with(run(words))
            return
        target, words = target_of(words)
        _exit_with(run(words, send=entry.send(*target) if target else None))

    app.command(entry.name, help=entry.help, context_settings=_FORWARD, add_help_option=False)(
        command
    )


for _entry in FORWARDED:
    _forward(_entry)


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
    extension: Annotated[
        list[str] | None,
        typer.Option(help="Plugin module or .py file: offered in the dialog (repeatable)."),
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
        extensions=extension or [],
    )


def entry() -> None:
    """The process entry (`trainforge`, `python -m trainforge`): `main()`, then a quick exit.

    Everything the command wrote is closed by then; what is left is the interpreter's
    shutdown, whose garbage collection over every object torch and the libraries created
    took 0.7 s of the main job's 0.9 s exit on a 2-core CPU. `gc.freeze()` leaves those
    objects out of that last collection; modules, files and atexit hooks still close as
    usual. Only here, not in `main()`, which tests call inside their own process.

    `train` also starts with the collector off: its start-up imports torch and builds the
    data and the model, a few hundred thousand objects that live as long as the process, and
    six full collections over them took 0.48 s of the main job's 3 s start-up. The trainer
    switches the collector back on at the start of training, with those objects frozen
    (`train.steady_state`), so a long run still collects the garbage it makes.
    """
    import gc

    if sys.argv[1:2] == ["train"]:
        gc.disable()
    try:
        main()
    finally:
        gc.freeze()


def main() -> None:
    from trainforge.observe.quiet import install as quiet_console

    quiet_console()  # third-party noise off before any library is imported
    try:
        app()
    except UserError as err:
        print(err.line(), file=sys.stderr)
        sys.exit(2)
    except Exception as err:  # a library's write the disk refused (full, read-only)
        from trainforge.storage import disk_error_line

        line = disk_error_line(err)
        if line is None:
            raise
        print(line, file=sys.stderr)
        sys.exit(2)
