"""Checkpoint files: the only code that writes or reads them.

A checkpoint is a folder under `RUN/checkpoints/`:
    model.safetensors    model weights (safetensors: loading never runs code)
    state.pt             {part name: state} for every other registered part (optimizer,
                         scheduler, scaler, loader position, RNG states, counters, ...)
                         (torch.save; always read back with weights_only=True)
    config.yaml          the resolved run config
    meta.json            best_val, best_val_loss, best_step (= best_val_step), best_epoch,
                         config_hash, timestamp, versions
    manifest.json        a checksum (XXH3-128) of every file above, written last
It is written into a hidden temporary folder, fsynced, then renamed into place, so a crash
leaves either the old checkpoint or the new one, never half of one. Loading checks the
manifest; a folder without a valid manifest is not a checkpoint. `recover` tidies what a
crash mid-write leaves behind (temporary folders, a replaced folder not yet deleted).

The folders' names (`checkpoint-N`, `checkpoint_epoch_N`, `best_model`,
`checkpoint_time_limit`, `checkpoint_interrupted`) and which of them rotation deletes are
one table, `NAMES` (`engine.checkpoint_names`, re-exported here), read through `step_name`,
`best_name`, `interrupted_name`, ..., `is_periodic`; how many a run keeps and the disk they
need are `engine.checkpoint_space` (`checkpoints_kept`, `space_warning`). Torch is imported
only by the functions that need it, so the web app, the report and the doctor read the table
without it.

Beside the folders, `checkpoint_meta.json` summarises the run's checkpoints with the
training-optimisation notes' keys (best_val_loss, best_val_step, best_epoch, config_hash,
timestamp), the best value of metric_for_best_model and the newest checkpoint.

`checkpoint_write.CheckpointWriter` runs the write on a background thread after the trainer
has copied the state to CPU memory (`checkpoint_write.Snapshot`), so the loop stalls only for
the copy. A write the disk refuses (full,
read-only) becomes a one-line `StorageError` naming the space needed and the intact
checkpoint to resume from; `checkpoint.on_save_error` chooses between stopping and training
on without that save.

Every byte is written once and hashed on its way to the disk (`checkpoint_write`), so the
manifest needs no second read; rotation trusts folders this process wrote or verified while
their files are unchanged. `meta.json` records the layout's `FORMAT`; loading refuses another
format, and `check_model_fits` refuses weights of another model, each in one line that says
what differs.

The module is still longer than 400 lines: writing, verifying, loading, refusing and
rotating checkpoint files live here; the sharded reading and writing and the verification
are the parts to move out next.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge.engine.checkpoint_names import (  # noqa: F401  (ckpt.NAMES, ckpt.step_name, ...)
    NAMES,
    PATTERNS,
    best_name,
    epoch_name,
    interrupted_name,
    is_periodic,
    kind,
    step_name,
    time_limit_name,
)
from trainforge.engine.checkpoint_space import (  # noqa: F401  (ckpt.checkpoints_kept, ...)
    checkpoints_kept,
    estimate_bytes,
    most_kept,
    periodic_saves,
    space_warning,
)
from trainforge.errors import UserError
from trainforge.storage import storage_error

if TYPE_CHECKING:
    import torch

MANIFEST = "manifest.json"
WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
META = "meta.json"
STATE = "state.pt"
RUN_META = "checkpoint_meta.json"
# The layout above. A newer trainforge that changes it bumps FORMAT; loading a checkpoint of
# a format this version does not know is refused in one line (see `check_format`).
# Format 2: state.pt holds one entry per registered part (`engine.stateful`); format 1 kept
# the non-finite counts and the best values inside "trainer" (read by `engine.checkpointer`).
FORMAT = 2
READS = (1, 2)


def dcp_folder(folder: Path) -> Path:
    """The torch.distributed.checkpoint shards of checkpoint `folder` (an FSDP run's)."""
    return folder / "dcp"


def weights_file(folder: Path) -> Path:
    """The model weights of checkpoint `folder` (absent in a sharded one: see `dcp/`)."""
    return folder / WEIGHTS


# The name of the model's part in the state registry, and so in `dcp/` (its tensors are keyed
# "model.<parameter name>" there).
MODEL_PART = "model"


def weights_path(folder: Path) -> Path:
    """Where checkpoint `folder` keeps its model weights: `model.safetensors`, or for an FSDP
    run's checkpoint its `dcp/` folder (`read_weights` reads either)."""
    file, shards = weights_file(folder), dcp_folder(folder)
    return shards if not file.is_file() and shards.is_dir() else file


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The model weights at `path` whole, on the CPU, keyed by parameter name: a safetensors
    file, or a sharded checkpoint's `dcp/` folder. The shards are read by this process alone,
    into tensors shaped and typed as the checkpoint's own metadata says (no
    model is needed), as `dcp.load` reads every shard of a tensor it is given whole. Raises
    OSError or safetensors' error for a file it cannot read; a `dcp/` it cannot read is one
    line."""
    import torch
    from safetensors.torch import load_file

    if not path.is_dir():
        return load_file(str(path))
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    prefix = f"{MODEL_PART}."
    try:
        saved = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
        tensors = {
            key.removeprefix(prefix): torch.empty(entry.size, dtype=entry.properties.dtype)
            for key, entry in saved.items()
            if key.startswith(prefix) and isinstance(entry, TensorStorageMetadata)
        }
        with warnings.catch_warnings():
            # Each process reads alone (no_dist), also inside a process group (a DDP run's
            # init_from on every rank): no collective to wait on; torch warns that it does.
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load({MODEL_PART: tensors}, checkpoint_id=str(path), no_dist=True)
    except (Exception, dcp.CheckpointException) as err:  # the latter: a BaseException
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"cannot read the sharded weights in {path}: {first}", "pick another checkpoint"
        ) from None
    if not tensors:
        raise UserError(f"{path} holds no model weights", "pick another checkpoint")
    return tensors


def config_file(folder: Path) -> Path:
    """The resolved run config saved in checkpoint `folder`."""
    return folder / CONFIG


def run_meta_file(root: Path) -> Path:
    """`checkpoint_meta.json` in a run's checkpoints folder `root`."""
    return root / RUN_META


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    meta: dict[str, Any]

    @property
    def global_step(self) -> int:
        return int(self.meta.get("global_step", 0))


# Folders this process wrote or fully verified, with the (name, size, mtime, inode) of each
# file then: rotation lists the checkpoints after every save and need not hash them again.
_VERIFIED: dict[Path, tuple] = {}


def _signature(folder: Path, names: list[str]) -> tuple | None:
    try:
        stats = [(name, (folder / name).stat()) for name in sorted(names)]
    except OSError:
        return None
    return tuple((n, s.st_size, s.st_mtime_ns, s.st_ino) for n, s in stats)


def _remember_verified(folder: Path, manifest: Mapping[str, str]) -> None:
    names = [*manifest, MANIFEST]
    _VERIFIED[folder] = (names, _signature(folder, names))


def _fsync_file(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    folder: Path,
    *,
    model_state: Mapping[str, torch.Tensor] | None,
    state: Mapping[str, Any],
    meta: Mapping[str, Any],
    config_yaml: str,
    tmp: Path | None = None,
) -> Path:
    """Write one checkpoint atomically and return its final path.

    Every file is hashed while it is written (no second read); the files are fsynced
    together, the manifest last, then the folder is renamed into place. `model_state` None:
    the weights are already in `tmp` (a sharded `dcp/` folder written by every rank through
    torch.distributed.checkpoint); this adds the rest and commits. A write the disk refuses
    raises `StorageError` naming the space needed; the previous checkpoint stays as it was.
    """
    from trainforge.engine.checkpoint_write import (
        file_digest,
        tensor_bytes,
        write_file,
        write_safetensors,
    )

    tmp = tmp or folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    meta = {**meta, "format": FORMAT}
    from trainforge.engine.checkpoint_write import wait_for_copies

    wait_for_copies()  # a snapshot's deferred part has landed before any byte is written
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, str] = {}
        if model_state is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            manifest[WEIGHTS] = write_file(
                tmp / WEIGHTS, lambda out: write_safetensors(out, model_state), False
            )
        else:  # shards other ranks wrote: hashed by reading them back
            for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
                manifest[str(path.relative_to(tmp))] = file_digest(path)
        manifest.update(_write_small_files(tmp, state, meta, config_yaml))
        text = json.dumps(dict(sorted(manifest.items())), indent=2).encode("utf-8")
        write_file(tmp / MANIFEST, lambda out: out.write(text), False)
        for name in [*manifest, MANIFEST]:  # data first, the manifest last
            _fsync_file(tmp / name)
        _fsync_dir(tmp)
        _commit(tmp, folder)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        needed = tensor_bytes(model_state) + tensor_bytes(state) if model_state else None
        raise storage_error(
            "checkpoint", folder, err, needed, _previous_intact(folder.parent, folder)
        ) from None
    _remember_verified(folder, manifest)
    return folder


def _write_small_files(
    tmp: Path, state: Mapping[str, Any], meta: Mapping[str, Any], config_yaml: str
) -> dict[str, str]:
    """state.pt, config.yaml and meta.json, not yet fsynced: {name: checksum}."""
    import torch

    from trainforge.engine.checkpoint_write import write_file

    return {
        STATE: write_file(tmp / STATE, lambda out: torch.save(dict(state), out), False),
        CONFIG: write_file(tmp / CONFIG, lambda out: out.write(config_yaml.encode("utf-8")), False),
        META: write_file(
            tmp / META, lambda out: out.write(json.dumps(meta, indent=2).encode()), False
        ),
    }


def _commit(tmp: Path, folder: Path) -> None:
    """Rename the finished temporary folder into place (replacing a same-named one)."""
    old = folder.parent / f".old-{folder.name}-{os.getpid()}"
    if folder.is_symlink():  # a second name of another checkpoint (`alias`) becomes its own
        folder.unlink()
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    _fsync_dir(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def _previous_intact(root: Path, failed: Path) -> str:
    """What the run can resume from after a failed write, checked against its manifest."""
    intact = list_checkpoints(root)  # each one checked against its manifest
    if not intact:
        return "no earlier checkpoint exists to resume from"
    run = intact[-1].path.parent.parent
    return f"the previous checkpoint {intact[-1].path} is intact (resume with --resume {run})"


def _run_checkpoints(run_dir: Path) -> Path:
    from trainforge.runfolder import RunFolder

    return RunFolder(run_dir).checkpoints


def save_weights(
    path: Path, tensors: Mapping[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> Path:
    """Write one safetensors file atomically (hidden temporary name, fsync, rename) from the
    tensors' own memory (device tensors are copied to CPU, shared ones written in full). A
    write the disk refuses raises `StorageError`; the file there before stays as it was."""
    from trainforge.engine.checkpoint_write import tensor_bytes, write_file, write_safetensors

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(tmp, lambda out: write_safetensors(out, tensors, metadata))
        tmp.replace(path)
        _fsync_dir(path.parent)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise storage_error(
            "weights",
            path,
            err,
            tensor_bytes(tensors),
            _previous_intact(_run_checkpoints(path.parent), path),
        ) from None
    return path


@functools.cache
def library_versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"python": sys.version.split()[0]}
    for name in ("trainforge", "torch", "torchvision", "torchdata", "numpy", "safetensors"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    for name in ("transformers", "peft"):
        if name in sys.modules:
            versions[name] = metadata.version(name)
    return versions


def write_run_meta(root: Path, meta: Mapping[str, Any]) -> None:
    """Atomically (re)write `checkpoint_meta.json` beside the checkpoint folders."""
    # The training-optimisation notes' keys (best_val_loss, best_val_step, best_epoch,
    # config_hash, timestamp) beside the best value of metric_for_best_model.
    keys = (
        "best_val_loss", "best_val_step", "best_epoch", "config_hash", "timestamp",
        "best_val", "best_metric", "best_step",
    )  # fmt: skip
    data = {k: meta.get(k) for k in keys}
    data["latest"] = meta.get("name")
    data["latest_step"] = meta.get("global_step")
    tmp = root / f".{RUN_META}.tmp"
    try:
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        tmp.replace(root / RUN_META)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise storage_error(
            "checkpoint summary", root / RUN_META, err, 4096, _previous_intact(root, root)
        ) from None


def read_run_meta(root: Path) -> dict[str, Any]:
    return json.loads(run_meta_file(root).read_text(encoding="utf-8"))


def recover(root: Path) -> list[str]:
    """Undo what a crash mid-write left in `root`; returns one line per action taken."""
    actions: list[str] = []
    if not root.is_dir():
        return actions
    for item in sorted(root.iterdir()):
        if item.name.startswith(".old-") and item.is_dir():
            # A checkpoint being replaced: the new one may not have landed yet.
            name = item.name[len(".old-") :].rsplit("-", 1)[0]
            target = root / name
            if not target.exists() and verify(item) is None:
                item.rename(target)
                actions.append(f"restored {target.name} from an interrupted replace")
                continue
            shutil.rmtree(item, ignore_errors=True)
            actions.append(f"removed {item.name}")
        elif item.name.startswith((".tmp-", f".{RUN_META}.tmp")):
            if item.is_dir():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink(missing_ok=True)
            actions.append(f"removed unfinished write {item.name}")
    return actions


def verify(folder: Path, *, cached: bool = False) -> str | None:
    """None when the checkpoint is complete and intact, else the reason it is not.

    `cached`: a folder this process wrote or verified, whose files have not changed since
    (same size, modification time and inode), is not hashed again."""
    if cached and folder in _VERIFIED:
        names, signature = _VERIFIED[folder]
        if signature is not None and _signature(folder, names) == signature:
            return None
    from trainforge.engine.checkpoint_write import file_digest

    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return "no manifest (incomplete write)"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "unreadable manifest"
    for name, digest in manifest.items():
        path = folder / name
        if not path.is_file():
            return f"missing {name}"
        if file_digest(path, like=digest) != digest:
            return f"checksum mismatch in {name}"
    _remember_verified(folder, manifest)
    return None


def read_meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / META).read_text(encoding="utf-8"))


def load_checkpoint(
    folder: Path,
) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any], dict[str, Any]]:
    """(model state, trainer state, meta) of a verified checkpoint; never executes file code.

    The model state is None for a sharded checkpoint (weights in `dcp/`)."""
    import torch

    if not folder.is_dir():
        raise UserError(f"checkpoint {folder} not found", "pass a folder under RUN/checkpoints/")
    problem = verify(folder)
    if problem:
        raise UserError(f"checkpoint {folder} is not usable: {problem}", "pick another checkpoint")
    check_format(folder, read_meta(folder))
    sharded = dcp_folder(folder).is_dir()
    model_state = None if sharded else read_weights(weights_file(folder))
    try:
        state = torch.load(folder / STATE, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses anything that is not plain data
        raise UserError(
            f"checkpoint {folder}/{STATE} refused: {str(err).splitlines()[0]}",
            "it holds objects other than tensors and plain data; use a trusted checkpoint",
        ) from None
    return model_state, state, read_meta(folder)


_REPORTED: set[tuple[str, str]] = set()


def _report_skipped(folder: Path, problem: str) -> None:
    """One line per damaged folder per process, written in one call.

    Rotation lists the checkpoints at every save, so without the memo the same damaged folder
    would be reported again and again; a single write keeps the line whole when a background
    save reports while the training thread prints."""
    key = (str(folder), problem)
    if key in _REPORTED:
        return
    _REPORTED.add(key)
    sys.stdout.write(f"skipping checkpoint {folder}: {problem}\n")
    sys.stdout.flush()


def alias(root: Path, name: str, target: Path) -> bool:
    """Give checkpoint `target` (a folder in `root`) the second name `root/name`: a relative
    symbolic link, which a copied or moved run folder keeps. A checkpoint due under two
    names at one step (a one-step epoch's end is also a `save_steps` step) is then written
    once, and either name resumes it. False where the file system holds no links: the
    caller writes the checkpoint again instead."""
    link = root / name
    try:
        root.mkdir(parents=True, exist_ok=True)  # a background save may not have made it yet
        if link.is_symlink():
            link.unlink()
        elif link.is_dir():  # an earlier attempt's own copy at this name
            shutil.rmtree(link)
        link.symlink_to(target.name, target_is_directory=True)
    except OSError:
        return False
    return True


def is_alias(folder: Path) -> bool:
    """Whether `folder` is a second name of a checkpoint beside it (`alias`)."""
    return folder.is_symlink() and "/" not in os.readlink(folder)


def list_checkpoints(root: Path, *, cached: bool = False) -> list[Checkpoint]:
    """Verified checkpoints under `root`, oldest first by global step; bad ones reported.
    A second name of a checkpoint (`alias`) is not listed again.

    `cached`: trust folders this process already verified and that have not changed."""
    found = []
    if not root.is_dir():
        return found
    for folder in sorted(root.iterdir()):
        if not folder.is_dir() or folder.name.startswith(".") or is_alias(folder):
            continue
        problem = verify(folder, cached=cached)
        if problem:
            _report_skipped(folder, problem)
            continue
        found.append(Checkpoint(folder, read_meta(folder)))
    return sorted(found, key=lambda c: (c.global_step, c.meta.get("timestamp", "")))


def latest(root: Path) -> Checkpoint | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def rotate(root: Path, keep: int | None) -> list[Path]:
    """Delete the oldest periodic checkpoints beyond `keep`; best/time-limit/newest stay."""
    if keep is None:
        return []
    found = list_checkpoints(root, cached=True)  # folders written here are not re-hashed
    periodic = [c for c in found if is_periodic(c.path.name)]
    newest = found[-1] if found else None
    removed = []
    for ckpt in periodic[: max(0, len(periodic) - keep)]:
        if newest is not None and ckpt.path == newest.path:
            continue
        shutil.rmtree(ckpt.path, ignore_errors=True)
        removed.append(ckpt.path)
    for link in root.iterdir() if removed else ():  # the second names of what was removed
        if is_alias(link) and not link.exists():
            link.unlink(missing_ok=True)
    return removed


# ------------------------------------------------------------------ compatibility
def check_format(folder: Path, meta: Mapping[str, Any] | None = None) -> None:
    """Refuse, in one line, a checkpoint whose layout this trainforge does not know.

    Reads only meta.json (when `meta` is not given), so a caller can check a resume point
    before it writes anything. Checkpoints from before the format number was recorded have
    the layout of format 1."""
    if meta is None:
        try:
            meta = read_meta(folder)
        except (OSError, ValueError):
            return  # `verify` / `load_checkpoint` report a damaged folder
    saved = meta.get("format", 1)
    if isinstance(saved, int) and saved in READS:
        return
    written_by = (meta.get("versions") or {}).get("trainforge", "an unknown version")
    raise UserError(
        f"checkpoint {folder} was written by trainforge {written_by} with checkpoint format "
        f"{saved}, this trainforge {_own_version()} reads format {FORMAT}",
        f"load it with trainforge {written_by}, or start a new run",
    )


def _own_version() -> str:
    return library_versions().get("trainforge", "(version unknown)")


def check_model_fits(
    folder: Path,
    saved: Mapping[str, torch.Tensor],
    current: Mapping[str, torch.Tensor],
    model_config: Mapping[str, Any] | None = None,
) -> None:
    """Refuse, in one line, weights that do not fit the model this config builds.

    The line names the first model setting that differs between the checkpoint's saved
    config and `model_config` (e.g. `embedding_dim 192, this config has 384`) when there is
    one, and the first tensor that differs (name and shapes) in any case."""
    missing = sorted(set(current) - set(saved))
    extra = sorted(set(saved) - set(current))
    changed = [k for k, v in current.items() if k in saved and saved[k].shape != v.shape]
    if not (missing or extra or changed):
        return
    if changed:
        first = (
            f"{changed[0]} {tuple(saved[changed[0]].shape)} here {tuple(current[changed[0]].shape)}"
        )
    else:
        first = f"missing {missing[0]}" if missing else f"unexpected {extra[0]}"
    counts = f"{len(changed)} changed, {len(missing)} missing, {len(extra)} extra tensors"
    setting = _model_setting_diff(folder, model_config)
    what = f"was written for {setting}" if setting else "holds a different model"
    raise UserError(
        f"checkpoint {folder} {what} ({counts}; first: {first})",
        "use the model settings the checkpoint was trained with, or start a new run",
    )


def _model_setting_diff(folder: Path, model_config: Mapping[str, Any] | None) -> str | None:
    """`model vit embedding_dim 192, this config has 384` from the saved config, or None."""
    if model_config is None:
        return None
    try:
        import yaml

        saved = yaml.safe_load(config_file(folder).read_text(encoding="utf-8")) or {}
    except (OSError, ValueError, ImportError):
        return None
    saved_model = saved.get("model") if isinstance(saved, dict) else None
    if not isinstance(saved_model, dict):
        return None
    arch = saved_model.get("arch") or saved_model.get("name") or ""
    for key, value in model_config.items():
        if key in saved_model and saved_model[key] != value:
            label = f"model {arch} {key}".replace("  ", " ")
            return f"{label} {saved_model[key]}, this config has {value}"
    return None
