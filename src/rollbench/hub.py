"""Repositories on the Hugging Face hub, resolved to a commit and a directory in the cache.

One resolver for everything rollbench takes from the hub: policy checkpoints
(`--policy.path=ORG/NAME`, `policies/checkpoint.py`) and EnvHub files (`--env.hub_path=ORG/NAME`,
`benchmarks/envhub.py`). It calls `huggingface_hub.snapshot_download`, so the standard cache
and its variables (`HF_HOME`, `HF_HUB_CACHE`, `HF_TOKEN`, `HF_ENDPOINT`, `HF_HUB_OFFLINE`)
mean what they mean everywhere else. A commit already in the cache is used as it is, with
no request: a commit's snapshot never changes, so the processes of a run that the driver
hands a commit never ask the hub again. Every failure is a ConfigError of one line that
says what to do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from rollbench.errors import ConfigError, error_line

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def is_hub_id(path: str | None) -> bool:
    """`ORG/NAME` that is not a path on this machine (a local path always wins, as in LeRobot)."""
    return bool(path) and _HUB_ID.match(path or "") is not None and not Path(path or "").exists()


def is_commit(revision: str | None) -> bool:
    return revision is not None and _COMMIT.match(revision) is not None


def cache_root() -> Path:
    from huggingface_hub import constants  # optional: huggingface_hub (comes with lerobot)

    return Path(constants.HF_HUB_CACHE)


def cached_snapshot(repo_id: str, commit: str, required: Sequence[str]) -> Path | None:
    """The cached snapshot of `repo_id` at `commit`, when it holds every `required` file."""
    from huggingface_hub.file_download import repo_folder_name  # optional: huggingface_hub (comes with lerobot)

    folder = cache_root() / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots" / commit
    return folder if folder.is_dir() and all((folder / f).is_file() for f in required) else None


def download(repo_id: str, revision: str | None, where: str, patterns: Sequence[str] | None = None) -> Path:
    """The snapshot directory of `repo_id` at `revision` (default main), downloaded into the
    cache when missing (`patterns`: only the files that match). `where` names the flag."""
    from huggingface_hub import constants, snapshot_download  # optional: huggingface_hub (comes with lerobot)
    from huggingface_hub.errors import (  # optional: huggingface_hub (comes with lerobot)
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f"{repo_id}@{revision or 'main'}"
    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=list(patterns) if patterns else None)
    except GatedRepoError:
        raise ConfigError(
            f"{where}: {repo_id} is gated; accept its terms on its hub page with your account, then give a "
            f"token (HF_TOKEN=..., or `hf auth login`)"
        ) from None
    except RepositoryNotFoundError:
        raise ConfigError(
            f"{where}: not a local path, nor a repository on the hub (or a private one the token does not "
            f"reach: check the id; for a private repository set HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise ConfigError(f"{where}: {repo_id} has no revision {revision!r} (a branch, tag or commit)") from None
    except LocalEntryNotFoundError:
        raise _not_in_cache(where, repo_id, at, bool(constants.HF_HUB_OFFLINE)) from None
    except HfHubHTTPError as err:
        raise ConfigError(f"{where}: the hub answered {error_line(err)}") from None
    except OSError as err:  # a cache that cannot be written, a full disk
        raise ConfigError(f"{where}: cannot download {at} into {cache_root()} ({error_line(err)})") from None
    return Path(folder)


def _not_in_cache(where: str, repo_id: str, at: str, offline: bool) -> ConfigError:
    """The error for a snapshot (`at`: repo@revision) that is not in the cache and cannot be
    downloaded: with HF_HUB_OFFLINE set (`offline`), or with the hub out of reach."""
    if offline:
        return ConfigError(
            f"{where}: not a local path, and with HF_HUB_OFFLINE set {at} is not in the cache "
            f"({cache_root()}); download it once with the network (`hf download {repo_id}`), or point "
            f"HF_HUB_CACHE at a cache that holds it"
        )
    return ConfigError(
        f"{where}: not a local path, and the hub cannot be reached and {at} is not in the cache "
        f"({cache_root()}); check the network, or set HF_HUB_OFFLINE=1 with a cache that holds it"
    )


def resolve(
    repo_id: str, revision: str | None, where: str, required: Sequence[str], what: str,
    patterns: Sequence[str] | None = None,
) -> tuple[Path, str]:
    """(snapshot directory, commit) of `repo_id` at `revision`, holding every `required` file
    (`what` says what such a repository is, for the error when it does not)."""
    if is_commit(revision):
        assert revision is not None
        found = cached_snapshot(repo_id, revision, required)
        if found is not None:
            return found, revision
    folder = download(repo_id, revision, where, patterns)
    commit = folder.name
    missing = [f for f in required if not (folder / f).is_file()]
    if missing:
        raise ConfigError(f"{where}: {repo_id} (commit {commit[:12]}) has no {', '.join(missing)}; {what}")
    return folder, commit

