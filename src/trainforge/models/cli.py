"""`trainforge models`: list the Hugging Face model folders under models/, or create one.

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
    help="Hugging Face model folders: list them, or create a small random one (models init).",
)
ModelsDir = Annotated[Path, typer.Option("--models-dir", help="Folder holding the model folders.")]


@app.command("list")
def list_command(models_dir: ModelsDir = Path("models")) -> None:
    """Show each model folder with its architecture, parameter count and size on disk."""
    from trainforge.models.hf import human_bytes, list_models

    found = list_models(models_dir)
    if not found:
        print(f"no Hugging Face model folders in {models_dir}/")
        print("create one: trainforge models init NAME --arch gpt2 --size tiny --corpus FILE")
        return
    width = max(len(m.name) for m in found)
    print(f"{'name':<{width}}  {'kind':<12}  {'architecture':<22}  {'parameters':>12}  size")
    for m in found:
        params = f"{m.num_parameters:,}" if m.num_parameters else "?"
        line = f"{m.name:<{width}}  {m.kind:<12}  {m.arch:<22}  {params:>12}  "
        line += human_bytes(m.size_bytes)
        if m.base_model:
            line += f"  (base: {m.base_model})"
        print(line)


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
