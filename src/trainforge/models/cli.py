"""`trainforge models`: list the model folders under models/ and the Hugging Face cache, pull
an id into the cache, or create a small random model (init).

The top-level command forwards its arguments here (`main(argv)`), so importing the
`trainforge` command never imports torch or transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Hugging Face models: list (models/ and the cache), pull ID[@REV], or init a small one.",
)
ModelsDir = Annotated[Path, typer.Option("--models-dir", help="Folder holding the model folders.")]


@app.command("list")
def list_command(models_dir: ModelsDir = Path("models")) -> None:
    """Show the model folders under --models-dir and the models in the Hugging Face cache:
    architecture, parameter count and size on disk, read from the files (nothing loaded)."""
    from trainforge.models.hf import human_bytes, list_models
    from trainforge.models.hub import cache_folder, list_cached

    found = list_models(models_dir)
    if not found:
        print(f"no Hugging Face model folders in {models_dir}/")
        print("create one: trainforge models init NAME --arch gpt2 --size tiny --corpus FILE")
    else:
        width = max(len(m.name) for m in found)
        print(f"{'name':<{width}}  {'kind':<12}  {'architecture':<22}  {'parameters':>12}  size")
        for m in found:
            params = f"{m.num_parameters:,}" if m.num_parameters else "?"
            line = f"{m.name:<{width}}  {m.kind:<12}  {m.arch:<22}  {params:>12}  "
            line += human_bytes(m.size_bytes)
            if m.base_model:
                line += f"  (base: {m.base_model})"
            print(line)
    cached = list_cached()
    print(f"Hugging Face cache {cache_folder()}: {len(cached)} model(s)")
    if not cached:
        print("fetch one: trainforge models pull ORG/NAME[@REVISION]")
        return
    width = max(len(c.repo_id) for c in cached)
    print(f"{'id':<{width}}  {'revision':<10}  {'commit':<10}  {'architecture':<22}  "
          f"{'parameters':>12}  size")  # fmt: skip
    for c in cached:
        params = f"{c.num_parameters:,}" if c.num_parameters else "?"
        print(f"{c.repo_id:<{width}}  {c.revision:<10}  {c.commit[:10]:<10}  {c.arch:<22}  "
              f"{params:>12}  {human_bytes(c.size_bytes)}")  # fmt: skip


@app.command("pull")
def pull_command(
    model_id: Annotated[str, typer.Argument(metavar="ID[@REV]", help="A Hugging Face model id.")],
) -> None:
    """Download a model (its config, safetensors weights and tokenizer) into the Hugging Face
    cache, as train does for --base-model ID; HF_TOKEN is read from the environment."""
    from trainforge.errors import UserError
    from trainforge.models.hub import is_hub_id, resolve_hub_model

    if not is_hub_id(model_id):
        raise UserError(
            f"{model_id!r} is not a Hugging Face id (org/name[@revision]) or is a local folder",
            "pass an id such as google/gemma-3-270m-it or HuggingFaceTB/SmolLM2-135M@main",
        )
    found = resolve_hub_model(model_id, download=True)
    print(f"pulled {found.repo_id}@{found.revision}: commit {found.commit} ({found.path}); "
          f"train from it with --base-model {model_id}")  # fmt: skip


@app.command("init")
def init_command(
    name: Annotated[str, typer.Argument(help="Folder name under --models-dir.")],
    corpus: Annotated[
        list[Path],
        typer.Option(
            "--corpus", help="Text the tokenizer is trained on: .json/.jsonl/.tsv/.txt (repeat)."
        ),
    ],
    arch: Annotated[str, typer.Option("--arch", help="gpt2 or llama.")] = "gpt2",
    size: Annotated[
        str,
        typer.Option("--size", help="tiny (tests), small (demos) or g2p (word-to-phoneme pairs)."),
    ] = "tiny",
    vocab_size: Annotated[
        int | None, typer.Option("--vocab-size", help="Tokenizer vocabulary (default by size).")
    ] = None,
    chat_template: Annotated[
        bool, typer.Option("--chat-template/--no-chat-template", help="Add a ChatML template.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random weights.")] = 0,
    models_dir: ModelsDir = Path("models"),
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing folder.")
    ] = False,
) -> None:
    """Create a randomly initialised causal LM with a tokenizer trained on --corpus."""
    from trainforge.models.hf_init import init_model

    folder = init_model(
        name,
        arch=arch,
        size=size,
        corpus=corpus,
        models_dir=models_dir,
        vocab_size=vocab_size,
        chat_template=chat_template,
        seed=seed,
        overwrite=overwrite,
    )
    print(f"created {folder} ({arch} {size}); train from it with --base-model {folder}")


def main(argv: list[str]) -> int:
    """Run `trainforge models ARGV`; UserError propagates to the top-level handler."""
    try:
        app(args=argv, prog_name="trainforge models", standalone_mode=False)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.ClickException as err:
        err.show()
        return 2
    return 0
