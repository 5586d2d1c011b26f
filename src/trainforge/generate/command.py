"""What `trainforge generate` does with its arguments: the models asked (several side by side,
`--compare base` for the recorded base), the prompts (`--prompt`, `--prompt-file`), the
interactive `--chat` loop, and the printed blocks or the `--json` document."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from trainforge.errors import UserError
from trainforge.generate.sources import BASE, Settings, Source, locate


@dataclass
class Request:
    """What `trainforge generate` was asked for."""

    models: list[str]
    prompts: list[str] = field(default_factory=list)
    prompt_file: Path | None = None
    compare: list[str] = field(default_factory=list)
    chat: bool = False
    json_out: bool = False
    models_dir: str = "models"
    settings: Settings = field(default_factory=Settings)


def sources_of(request: Request) -> list[Source]:
    """Every model asked, located before anything loads (a wrong name costs no model load);
    `base` stands for the base model the first model records."""
    if not request.models:
        raise UserError("no model given", "trainforge generate MODEL_OR_RUN --prompt TEXT")
    found = [locate(name, request.models_dir) for name in request.models]
    for other in request.compare:
        if other != BASE:
            found.append(locate(other, request.models_dir))
            continue
        base = found[0].base_model
        if base is None:
            raise UserError(
                f"--compare base: {found[0].label} records no base model",
                "name the base model: --compare models/NAME",
            )
        found.append(Source(f"base ({base})", base))
    return found


def prompts_of(request: Request) -> list[str]:
    prompts = list(request.prompts)
    if request.prompt_file is not None:
        try:
            text = request.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(
                f"--prompt-file {request.prompt_file}: {type(err).__name__}",
                "pass a UTF-8 text file with one prompt per line",
            ) from None
        prompts += [line.strip() for line in text.splitlines() if line.strip()]
    if request.chat and prompts:
        raise UserError("--chat reads its prompts from the terminal", "drop --prompt or --chat")
    if not request.chat and not prompts:
        raise UserError(
            "nothing to ask", "give --prompt TEXT (repeatable), --prompt-file FILE or --chat"
        )
    return prompts


def run(request: Request, stdin: TextIO | None = None) -> dict[str, Any]:
    """Answer the prompts with every model (or hold the chat); print the blocks (or the JSON
    document with `json_out`) and return {"models": [...], "answers": [...]}."""
    from trainforge.generate.answer import answer, load

    if request.chat and (len(request.models) > 1 or request.compare):
        raise UserError("--chat talks to one model", "drop --compare, or ask with --prompt")
    prompts = prompts_of(request)
    sources = sources_of(request)
    say = _quiet if request.json_out else print
    loaded = []
    for source in sources:
        loaded.append(load(source, request.settings))
        say(loaded[-1].describe())
    if request.chat:
        return _chat(loaded[0], request.settings, stdin or sys.stdin)
    width = max(len(m.source.label) for m in loaded)
    answers = []
    for number, prompt in enumerate(prompts, 1):
        said = {m.source.label: answer(m, [_user(prompt)], request.settings) for m in loaded}
        answers.append({"prompt": prompt, "answers": said})
        say(f"\n[{number}] {prompt}")
        for label, text in said.items():
            say(f"  {label:<{width}}  {text}" if len(said) > 1 else f"  {text}")
    result = {"models": [m.describe() for m in loaded], "answers": answers}
    if request.json_out:
        print(json.dumps(result, ensure_ascii=False))
    return result


def _chat(loaded: Any, settings: Settings, stdin: TextIO) -> dict[str, Any]:
    """A conversation on stdin, one user turn a line, the model's turns kept; an empty
    line, `/exit` or the end of input ends it."""
    from trainforge.generate.answer import answer

    print("chat: one message a line; an empty line or /exit ends the chat")
    conversation: list[dict[str, str]] = []
    while True:
        print("you> ", end="", flush=True)
        line = stdin.readline()
        text = line.strip()
        if not line or not text or text == "/exit":
            print()
            break
        conversation.append(_user(text))
        reply = answer(loaded, conversation, settings)
        conversation.append({"role": "assistant", "content": reply})
        print(f"model> {reply}")
    turns = [m for m in conversation if m["role"] == "assistant"]
    return {"models": [loaded.describe()], "conversation": conversation, "turns": len(turns)}


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _quiet(*_: Any, **__: Any) -> None:
    """--json: the document alone is the output."""
