"""Secrets never reach a log, a config dump or a checkpoint.

Values of environment variables whose names look secret (API keys, tokens, passwords) are
collected once, and every string that trainforge writes to a tracker goes through `scrub`.
Metric values are numbers and cannot carry a secret; the run config has no field for one.
"""

from __future__ import annotations

import os
import re

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
REDACTED = "***"


def secret_values(env: dict[str, str] | None = None) -> list[str]:
    env = dict(os.environ) if env is None else env
    values = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= 6}
    return sorted(values, key=len, reverse=True)


def scrub(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, REDACTED)
    return text
