"""Base models by Hugging Face id: which values are ids, and the snapshot folder they mean.

Owns `is_hub_id` (a value such as `org/name` or `org/name@rev` that is not a local folder) and
`resolve_hub_model` (the id -> its snapshot folder and commit hash in huggingface_hub's own
cache, downloaded with `snapshot_download` when online). transformers resolves
`from_pretrained("org/name")` through the same cache, so a model pulled by `hf download`,
transformers or `trainforge models pull` is found by all three, and the folder the DGX plan
mounts (`~/.cache/huggingface`, or `HF_HOME` / `HF_HUB_CACHE`) is the one read.

Library used: huggingface_hub (cache layout, resumable downloads, HF_TOKEN, HF_HUB_OFFLINE).
Written here only the mapping of its errors to one line with the fix, and the choice of the
files a causal LM needs (the allow-list), so a repository's other formats are not fetched.
An id is never created as a random model: `model.init_arch` applies to local paths only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from trainforge.errors import UserError

# The files a causal LM's save_pretrained folder and its tokenizer need; no .bin, .gguf,
# ONNX or original/ checkpoints.
ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
]
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*(@[A-Za-z0-9_./-]+)?$")
_LOCAL_PREFIXES = ("./", "../", "/", "~")


@dataclass(frozen=True)
class HubModel:
    """A resolved id: the snapshot folder, the repository, the revision asked, its commit."""

    path: Path
    repo_id: str
    revision: str
    commit: str


def split_id(value: str) -> tuple[str, str]:
    """`org/name@rev` -> (`org/name`, `rev`); no `@` means `main`."""
    repo_id, _, revision = value.partition("@")
    return repo_id, revision or "main"


def is_hub_id(value: str, models_dir: str | Path = "models") -> bool:
    """Whether `value` names a Hub repository rather than a local folder: `org/name[@rev]`,
    not an existing folder, not written as a path (`./`, `/`, `~`), not under models_dir."""
    if not value or value.startswith(_LOCAL_PREFIXES) or not _ID.match(value):
        return False
    if Path(value).expanduser().exists():
        return False
    first = value.split("/", 1)[0]
    return first not in {Path(models_dir).name, "models", "runs", ".", ".."}


def cache_folder() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def pull_fix(value: str) -> str:
    return f"run `trainforge models pull {value}` where there is network (or unset HF_HUB_OFFLINE)"


def resolve_hub_model(value: str, *, download: bool | None = None) -> HubModel:
    """The snapshot folder of an id in the cache; downloaded first when online (`download`
    None: unless HF_HUB_OFFLINE is set). Every failure is one UserError with the fix."""
    from huggingface_hub import snapshot_download

    repo_id, revision = split_id(value)
    online = (not offline()) if download is None else download
    if online:  # a cached snapshot costs two small API calls; the files are not fetched again
        print(f"base model {value}: fetching from the Hub into {cache_folder()} (resumable)")
    try:
        folder = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=ALLOW_PATTERNS,
            local_files_only=not online,
            tqdm_class=_quiet_bars(),
        )
    except Exception as err:  # huggingface_hub's errors, mapped below to one line each
        raise hub_error(value, err, online) from None
    path = Path(folder)
    return HubModel(path=path, repo_id=repo_id, revision=revision, commit=path.name)


def hub_error(value: str, err: Exception, online: bool) -> UserError:
    """One line for a huggingface_hub failure: what happened to `value`, and the fix."""
    from huggingface_hub import errors

    repo_id, revision = split_id(value)
    if isinstance(err, errors.GatedRepoError):
        return UserError(
            f"{repo_id} is gated: its licence must be accepted and a token given",
            "accept it on the model's page, then export HF_TOKEN=<a read token> "
            "(https://huggingface.co/settings/tokens) and rerun",
        )
    if isinstance(err, errors.RevisionNotFoundError):
        return UserError(
            f"{repo_id} has no revision {revision!r}",
            "use a branch, tag or commit hash the repository has (org/name@REV)",
        )
    if isinstance(err, errors.RepositoryNotFoundError):
        return UserError(
            f"no model {repo_id} on the Hub (or it is private and no token was given)",
            "check the id's spelling, or export HF_TOKEN=<a read token> for a private model",
        )
    if isinstance(err, errors.LocalEntryNotFoundError) and online:  # no answer from the Hub
        from huggingface_hub import constants

        return UserError(
            f"base model {value} is not in the Hugging Face cache {cache_folder()} and the Hub "
            f"({constants.ENDPOINT}) did not answer",
            "check the network (or HF_ENDPOINT for a mirror) and rerun; or "
            f"`trainforge models pull {value}` on a machine that has network",
        )
    if isinstance(err, errors.LocalEntryNotFoundError) or not online:
        return UserError(
            f"base model {value} is not in the Hugging Face cache {cache_folder()} "
            "and downloads are off",
            pull_fix(value),
        )
    status = getattr(getattr(err, "response", None), "status_code", None)
    if status == 401:
        return UserError(
            f"the Hub refused {repo_id} without a valid token (401)",
            "export HF_TOKEN=<a read token> (https://huggingface.co/settings/tokens) and rerun",
        )
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return UserError(
        f"downloading {value} failed: {reason}",
        "check the network and rerun (the download resumes), or set HF_ENDPOINT for a mirror",
    )


def _quiet_bars() -> type:
    """A tqdm class that draws nothing: the download is one trainforge line, not hf's bars."""
    from tqdm.auto import tqdm

    class Quiet(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet


@dataclass(frozen=True)
class CachedModel:
    """One snapshot of a model in the cache, read from its files (nothing loaded)."""

    repo_id: str
    revision: str  # the refs pointing at it (`main`, a tag), else the short commit
    commit: str
    arch: str
    num_parameters: int
    size_bytes: int
    path: Path


def list_cached() -> list[CachedModel]:
    """The model snapshots in huggingface_hub's cache that hold a config.json, by id."""
    import json

    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    from trainforge.models.hf import _count_safetensors

    try:
        info = scan_cache_dir(cache_folder())
    except CacheNotFound:
        return []
    found = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        for rev in sorted(repo.revisions, key=lambda r: r.commit_hash):
            try:
                config = json.loads((rev.snapshot_path / "config.json").read_text("utf-8"))
            except (OSError, ValueError):
                continue  # a tokenizer-only or damaged snapshot is not a base model
            archs = config.get("architectures") or [config.get("model_type", "?")]
            refs = ",".join(sorted(rev.refs)) or rev.commit_hash[:10]
            found.append(
                CachedModel(
                    repo_id=repo.repo_id, revision=refs, commit=rev.commit_hash,
                    arch=str(archs[0]), num_parameters=_count_safetensors(rev.snapshot_path),
                    size_bytes=rev.size_on_disk, path=rev.snapshot_path,
                )
            )  # fmt: skip
    return found


def run_record(value: str | None, models_dir: str | Path = "models") -> dict[str, str] | None:
    """What run.json records of a base model given by id (None for a folder): the id, the
    revision asked and the commit it resolved to, read from the cache (the run fetched it)."""
    if not value or not is_hub_id(value, models_dir):
        return None
    try:
        found = resolve_hub_model(value, download=False)
    except UserError:
        return None
    return {"id": found.repo_id, "revision": found.revision, "commit": found.commit}


def resume_pin(record: dict, flags: dict) -> str | None:
    """`id@commit` for a resume of a run that trained from an id, so that it continues on the
    same weights even when the branch has moved (None when a base model is named now)."""
    base = record.get("base_model")
    if not isinstance(base, dict) or "model.model_name_or_path" in flags:
        return None
    return f"{base['id']}@{base['commit']}" if base.get("id") and base.get("commit") else None


def cached_ids() -> list[str]:
    """The ids with a model snapshot (a config.json) in the cache, from the folder names alone
    (the web dialog's choices: no file is opened)."""
    root = cache_folder()
    if not root.is_dir():
        return []
    found = {
        repo.name[len("models--") :].replace("--", "/", 1)
        for repo in root.glob("models--*--*")
        if any((snap / "config.json").exists() for snap in repo.glob("snapshots/*"))
    }
    return sorted(found)
