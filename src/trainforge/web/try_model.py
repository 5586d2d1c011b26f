"""The Models page's "Try it" box: a prompt in, the model's answer out, and, for a model that
records its base model, the base model's answer beside it (`POST /api/models/try`).

The answer comes from `trainforge generate MODEL --prompt TEXT --json` run as a child process
in the project folder, one at a time (others wait for it), killed past `TRY_TIMEOUT_S`. The
server itself never loads a model: torch and transformers would cost it seconds and
hundreds of MiB beside a training on the same memory (a Jetson shares one memory; the same
reason `model_list` reads safetensors headers by hand), and a generation would hold a server
thread for its whole length. The child is the command a user runs, with its own checks and
one-line refusals, which the box shows as they are.

Library considered: FastAPI's `BackgroundTasks` run after the answer is sent, and a thread
pool would load the model inside the server; neither fits.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from trainforge.web.limits import MAX_NAME, MAX_TEXT, cut
from trainforge.web.model_list import list_model_names
from trainforge.web.paths import shown
from trainforge.web.settings import is_plain_name

router = APIRouter(prefix="/api")
TRY_TIMEOUT_S = 300.0  # a hung child, not speed: a small model answers in seconds on a CPU
_ONE_AT_A_TIME = asyncio.Lock()


class TryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(max_length=MAX_NAME, description="A model folder name under models/.")
    prompt: str = Field(min_length=1, max_length=MAX_TEXT, description="The prompt.")
    compare_base: bool = Field(False, description="Also ask the base model the model records.")
    max_new_tokens: int = Field(64, ge=1, le=1024, description="Tokens to generate at most.")


class TryAnswer(BaseModel):
    model: str
    models: list[str] = Field(description="One line per model: its weights, layout and stops.")
    answers: dict[str, str] = Field(description="Model label -> its answer, in asking order.")


def generate_command(model: str, body: TryRequest) -> list[str]:
    """The child's command line (the prompt is one argument: never read by a shell)."""
    argv = [sys.executable, "-m", "trainforge", "generate", model, "--prompt", body.prompt,
            "--max_new_tokens", str(body.max_new_tokens), "--json"]  # fmt: skip
    return [*argv, "--compare", "base"] if body.compare_base else argv


@router.post("/models/try", responses={400: {}, 404: {}, 422: {}, 504: {}})
async def try_model(request: Request, body: TryRequest) -> TryAnswer:
    """Ask a model under models/ (and its recorded base) one prompt."""
    settings = request.app.state.trainforge.settings
    if not is_plain_name(body.model):
        raise HTTPException(400, f"model {shown(body.model)} is not a plain name")
    if body.model not in list_model_names(settings.models_path):
        raise HTTPException(404, f"no model {shown(body.model)} in {settings.models_dir}/")
    model = f"{settings.models_dir}/{body.model}"
    async with _ONE_AT_A_TIME:
        code, out, err = await _run(generate_command(model, body), settings.root)
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        raise HTTPException(422, cut(lines[-1]) if lines else f"generate ended with {code}")
    return TryAnswer(model=body.model, **_answer_of(out))


async def _run(argv: list[str], cwd: Any) -> tuple[int, str, str]:
    child = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(child.communicate(), TRY_TIMEOUT_S)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise HTTPException(504, f"no answer within {TRY_TIMEOUT_S:.0f} s") from None
    text = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    return int(child.returncode or 0), *text


def _answer_of(out: str) -> dict[str, Any]:
    """The document `generate --json` prints as its one line."""
    try:
        document = json.loads(out.strip().splitlines()[-1])
        (block,) = document["answers"]
        return {"models": list(document["models"]), "answers": dict(block["answers"])}
    except (ValueError, KeyError, IndexError, TypeError):
        raise HTTPException(422, "generate printed no answer") from None
