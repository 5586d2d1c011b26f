"""Export options and the checks that run before anything heavy is imported (no torch here).

`trainforge export` checks formats, options and that the source exists first, so a typo is
answered at once, with one line and exit code 2. The formats are the names registered in
`trainforge.registry.EXPORT_FORMATS` (built-ins: `export.formats`); each format owns its
options model, fed by `--option KEY=VALUE` (`ExportOptions.extra`) and, for the built-ins,
by the named flags that spelled them before (`--opset`, `--sparsity`, ...): `of(format)`
reads one format's options.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from trainforge.errors import UserError
from trainforge.options import check_options as check_entry_options
from trainforge.options import options_model
from trainforge.registry import EXPORT_FORMATS

SOURCE_HINT = (
    "pass a run folder such as runs/NAME or a checkpoint such as runs/NAME/checkpoints/best_model"
)


@dataclass(frozen=True)
class ExportOptions:
    output: Path | None = None  # default: RUN_DIR/export
    opset: int = 18
    # torch.onnx exporter: dynamo (torch.export), torchscript, or auto (dynamo from opset 18,
    # torchscript below: see export.onnx_low_opset)
    exporter: str = "auto"
    input_name: str | None = None  # ONNX input tensor name (default: the task's, e.g. images)
    output_name: str | None = None  # ONNX output tensor name (default: logits)
    tolerance: float = 1e-4  # max |ONNX - PyTorch| on the validation set
    calibration_batches: int = 8
    sparsity: float = 0.5
    finetune_epochs: float = 0.0
    finetune_lr: float | None = None  # default: a tenth of the run's peak learning rate
    latency_runs: int = 100
    # `--option KEY=VALUE` pairs: each goes to the formats whose options have KEY, over the
    # named fields above (the built-ins' old spellings).
    extra: Mapping[str, Any] = field(default_factory=dict)

    def given(self, fmt: str) -> dict[str, Any]:
        """The values format `fmt`'s options model takes from these options."""
        fields = options_model(EXPORT_FORMATS.get(fmt)).model_fields
        values = {name: getattr(self, name) for name in fields if name in _NAMED}
        values.update({key: value for key, value in self.extra.items() if key in fields})
        return values

    def of(self, fmt: str) -> Any:
        """Format `fmt`'s options, read by its model (checked by `check_format_options`)."""
        return options_model(EXPORT_FORMATS.get(fmt)).model_validate(self.given(fmt))


# The named fields of ExportOptions that formats' options may take.
_NAMED = (
    "opset", "exporter", "input_name", "output_name", "tolerance", "calibration_batches",
    "sparsity", "finetune_epochs", "finetune_lr",
)  # fmt: skip


def parse_option(item: str) -> tuple[str, Any]:
    """`KEY=VALUE` -> (key, value); the value read as YAML, so 17, 0.3, true, null work."""
    from trainforge.config.loading import parse_key_value

    return parse_key_value(item, "--option", "opset=17")


def check_format_options(options: ExportOptions, wanted: list[str]) -> None:
    """Every `--option` key belongs to a wanted format, and every wanted format's options
    read; else one line naming the option (with the nearest name) and the format."""
    models: dict[str, type[BaseModel]] = {
        fmt: options_model(EXPORT_FORMATS.get(fmt)) for fmt in wanted
    }
    known = sorted({name for model in models.values() for name in model.model_fields})
    for key, value in options.extra.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = (
                f"did you mean {close[0]}?"
                if close
                else (f"the options of {', '.join(wanted)}: {', '.join(known) or 'none'}")
            )
            raise UserError(f"--option {key}={value}: unknown option of {', '.join(wanted)}", hint)
    for fmt, model in models.items():
        _, problems = check_entry_options(model, options.given(fmt), f"export format {fmt}")
        for key, value, reason in problems:
            shown = f"{key}={value}" if key else fmt
            raise UserError(f"--option {shown}: {reason}", "see `trainforge export --help`")


def check_formats(formats: list[str], source: Path | None = None) -> list[str]:
    """Registered, de-duplicated formats in the order given (`all` means every format);
    with `source`, the plugins that run records are imported first (their formats count)."""
    if source is not None:
        from trainforge.export.plugins import load_run_plugins

        load_run_plugins(source)
    known = EXPORT_FORMATS.names()
    wanted: list[str] = []
    for item in formats:
        for name in (p.strip().lower() for p in item.split(",")):
            for one in known if name == "all" else (name,):
                if one not in EXPORT_FORMATS:
                    raise UserError(
                        EXPORT_FORMATS.unknown_message(one),
                        f"use --format with one of: {', '.join(known)} (or all)",
                    )
                if one not in wanted:
                    wanted.append(one)
    if not wanted:
        raise UserError("no export format given", f"use --format {'|'.join(known)}")
    return wanted


def check_options(options: ExportOptions) -> None:
    if options.exporter not in ("auto", "dynamo", "torchscript"):
        raise UserError(
            f"--exporter {options.exporter!r} is not an ONNX exporter",
            "use auto, dynamo or torchscript",
        )
    if not 11 <= options.opset <= 23:
        raise UserError(
            f"--opset {options.opset} is out of range", "use an opset from 11 to 23 (default 18)"
        )
    if options.exporter == "dynamo" and options.opset < 18:
        # torch's dynamo exporter writes opset 18 when asked for less (onnx_low_opset).
        raise UserError(
            f"--exporter dynamo writes ONNX opset 18 and newer, not --opset {options.opset}",
            "leave --exporter out (auto takes torchscript below opset 18) or use "
            "--exporter torchscript",
        )
    _check_tensor_names(options)
    if not 0.0 < options.sparsity < 1.0:
        raise UserError(
            f"--sparsity {options.sparsity} must be between 0 and 1", "e.g. --sparsity 0.5"
        )
    if options.finetune_epochs < 0:
        raise UserError(f"--finetune-epochs {options.finetune_epochs} is negative", "use 0 or more")
    if options.calibration_batches < 1:
        raise UserError("--calibration-batches must be at least 1", "e.g. --calibration-batches 8")
    if options.tolerance <= 0:
        raise UserError(f"--tolerance {options.tolerance} must be positive", "e.g. 1e-4")


def _check_tensor_names(options: ExportOptions) -> None:
    names = {"--input-name": options.input_name, "--output-name": options.output_name}
    for flag, name in names.items():
        if name is not None and not name.replace("_", "a").replace(".", "a").isalnum():
            raise UserError(
                f"{flag} {name!r} is not a tensor name",
                f"use letters, digits and _, e.g. {flag} input",
            )
    if options.input_name is not None and options.input_name == options.output_name:
        raise UserError(
            f"--input-name and --output-name are both {options.input_name!r}",
            "give the two tensors different names, e.g. --input-name input --output-name output",
        )


def check_source_exists(path: Path) -> None:
    # The ViT guide's `checkpoints/NAME.pth` names the folder NAME: the early check reads
    # that spelling as the later read does, or it refuses what the read would accept.
    from trainforge.runfolder import guide_spelling

    if not guide_spelling(path).exists():
        raise UserError(f"run folder or checkpoint {path} not found", SOURCE_HINT)
