"""Secrets never reach a log, a config dump or a checkpoint.

Values of environment variables whose names look secret (API keys, tokens, passwords) are
collected when needed, and every string that trainforge writes to a tracker goes through
`scrub`; a whole config (the dump, tracker params) goes through `scrub_mapping`. So a token
pasted into a free-text field (`notes`, a run or experiment name, a tracking URI with
credentials) is written as `***` as long as its value is in such a variable. Metric values
are numbers and cannot carry a secret; the run config has no field meant for one.
"""

from __future__ import annotations

import os
import re
from typing import Any

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
REDACTED = "***"
# Shorter values (a flag such as "1" or "true" in HF_HUB_DISABLE_TOKEN...) would mask
# ordinary words everywhere; no real key or token is this short.
MIN_SECRET_CHARS = 6


def secret_values(env: dict[str, str] | None = None) -> list[str]:
    """Values of secret-named variables in `env` (default: the environment), longest first,
    so that a secret containing another is masked whole."""
    env = dict(os.environ) if env is None else env
    values = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def scrub(text: str, secrets: list[str] | None = None) -> str:
    """`text` with every occurrence of every secret value replaced by `***`."""
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, REDACTED)
    return text


def scrub_mapping(data: Any, secrets: list[str] | None = None) -> Any:
    """A copy of nested dicts/lists with every string scrubbed; other values as they are."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(data, str):
        return scrub(data, secrets)
    if isinstance(data, dict):
        return {key: scrub_mapping(value, secrets) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(scrub_mapping(value, secrets) for value in data)
    return data
