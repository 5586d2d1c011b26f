"""The environment layer: the tracker variables users already export, as run-config values.

Weights & Biases and MLflow document their environment variables as defaults that explicit
arguments override (wandb.init(project=...) beats WANDB_PROJECT; a tracking URI set in code
beats MLFLOW_TRACKING_URI). trainforge keeps that precedence: built-in defaults and the
profile < these variables < the run config file < command-line flags. Only variables that
name a run-config field are mapped here; `HF_HOME`, `HF_HUB_OFFLINE` and
`TRANSFORMERS_OFFLINE` are read by huggingface_hub and transformers themselves (trainforge
reads models from local folders and never sets or overrides them), and `WANDB_API_KEY`
stays in the environment so that no file ever holds it.

pydantic-settings was considered: it reads variables into a model, but not into a layer
below the config file with a per-field source, which `config show` needs; a table is enough.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Variable -> (dotted field, converter). A converter returns None to ignore a value.
_WANDB_MODES = {"online": "online", "run": "online", "offline": "offline", "dryrun": "offline"}


def _text(value: str) -> str | None:
    return value.strip() or None


def _wandb_mode(value: str) -> str | None:
    return _WANDB_MODES.get(value.strip().lower())


ENV_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "WANDB_PROJECT": ("logging.wandb_project", _text),
    "WANDB_ENTITY": ("logging.wandb_entity", _text),
    "WANDB_MODE": ("logging.wandb_mode", _wandb_mode),
    "WANDB_DIR": ("logging.wandb_dir", _text),
    "WANDB_RUN_GROUP": ("logging.wandb_run_group", _text),
    "MLFLOW_TRACKING_URI": ("logging.mlflow_tracking_uri", _text),
    "MLFLOW_EXPERIMENT_NAME": ("logging.mlflow_experiment", _text),
}


def environment_layer(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The config values `env` sets, nested ({"logging": {"wandb_project": "gemma3"}}), and
    each one's source by dotted path ("logging.wandb_project" -> "env WANDB_PROJECT").

    WANDB_MODE=disabled (W&B's own switch for "make every call a no-op") turns
    logging.wandb off; other unknown modes are left to the config.
    """
    layer: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, (path, convert) in ENV_FIELDS.items():
        raw = env.get(name)
        if raw is None:
            continue
        value = convert(raw)
        if value is None and name == "WANDB_MODE" and raw.strip().lower() == "disabled":
            path, value = "logging.wandb", False
        if value is None:
            continue
        section, leaf = path.split(".")
        layer.setdefault(section, {})[leaf] = value
        sources[path] = f"env {name}"
    return layer, sources
