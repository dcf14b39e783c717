"""Checkpoints given as hub ids: `--policy.path=ORG/NAME [--policy.revision=REV]`.

A `--policy.path` that is not an existing directory and reads `ORG/NAME` is a repository on
the Hugging Face hub, as lerobot-eval takes it. The driver resolves it once, before any
output is written (`resolve_policy`): `huggingface_hub.snapshot_download` into the
standard cache (`HF_HOME`, `HF_HUB_CACHE`, `HF_TOKEN` and `HF_HUB_OFFLINE` are honoured,
because huggingface_hub reads them), and the commit it landed on goes into the config as
`--policy.commit`. From then on every process of the run (the driver's policy, shard
processes, `rollbench check`, `serve`, `tune`) finds the checkpoint by that commit in the
cache (`checkpoint_dir`): a commit's snapshot never changes, so nothing is downloaded or
even asked of the hub a second time.

The commit, not the branch, is part of a run's identity: when `main` has moved since a run
started, rerunning its command does not mix the two checkpoints' episodes in one log; it
stops and names the commit that finishes the run (`--policy.revision=<commit>`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

from rollbench import timeline
from rollbench.config.policy import PolicyConfig
from rollbench.errors import ConfigError

log = logging.getLogger(__name__)

#: what a LeRobot checkpoint needs (the processors' stats are safetensors files beside them)
REQUIRED_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")
#: what is downloaded of a repository: configs, processor pipelines, weights and stats,
#: the model card; not training state or anything else a repository may carry
PATTERNS = ("*.json", "*.safetensors", "README.md")

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def is_hub_id(path: str | None) -> bool:
    """`ORG/NAME` that is not a path on this machine (a local directory always wins, as in LeRobot)."""
    return bool(path) and _HUB_ID.match(path or "") is not None and not Path(path or "").exists()


def _cache_root() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def cached_snapshot(repo_id: str, commit: str) -> Path | None:
    """The cached snapshot of `repo_id` at `commit`, when it holds every required file."""
    from huggingface_hub.file_download import repo_folder_name

    folder = _cache_root() / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots" / commit
    return folder if all((folder / f).is_file() for f in REQUIRED_FILES) else None


def download(repo_id: str, revision: str | None) -> Path:
    """The snapshot directory of `repo_id` at `revision` (default main), downloaded into the
    cache when missing; every failure a ConfigError of one line that says what to do."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"--policy.path={repo_id}" + (f" --policy.revision={revision}" if revision else "")
    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=list(PATTERNS))
    except GatedRepoError:
        raise ConfigError(
            f"{where}: the repository is gated; accept its terms on its hub page with your account, then give "
            f"a token (HF_TOKEN=..., or `hf auth login`)"
        ) from None
    except RepositoryNotFoundError:
        raise ConfigError(
            f"{where}: not a local directory, nor a repository on the hub (or a private one the token does not "
            f"reach: check the id; for a private repository set HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise ConfigError(f"{where}: the repository has no revision {revision!r} (a branch, tag or commit)") from None
    except LocalEntryNotFoundError:
        if _offline():
            raise ConfigError(
                f"{where}: not a local directory, and with HF_HUB_OFFLINE set {repo_id}@{revision or 'main'} is "
                f"not in the cache ({_cache_root()}); download it once with the network (`hf download {repo_id}`), "
                f"or point HF_HUB_CACHE at a cache that holds it"
            ) from None
        raise ConfigError(
            f"{where}: not a local directory, and the hub cannot be reached and {repo_id}@{revision or 'main'} is not in the cache "
            f"({_cache_root()}); check the network, or set HF_HUB_OFFLINE=1 with a cache that holds it"
        ) from None
    except HfHubHTTPError as err:
        raise ConfigError(f"{where}: the hub answered {_first_line(err)}") from None
    except OSError as err:  # a cache that cannot be written, a full disk
        raise ConfigError(f"{where}: cannot download into {_cache_root()} ({_first_line(err)})") from None
    return Path(folder)


def resolve(repo_id: str, revision: str | None) -> tuple[Path, str]:
    """(snapshot directory, commit) of a hub checkpoint; a cached commit costs no request."""
    if revision is not None and _COMMIT.match(revision):
        found = cached_snapshot(repo_id, revision)
        if found is not None:
            return found, revision
    folder = download(repo_id, revision)
    commit = folder.name
    missing = [f for f in REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        raise ConfigError(
            f"--policy.path={repo_id} (commit {commit[:12]}): the repository has no {', '.join(missing)}; a LeRobot "
            f"policy checkpoint holds {', '.join(REQUIRED_FILES)} (LeRobot >= 0.4 saves the processor pipelines "
            f"beside the weights)"
        )
    return folder, commit


def resolve_policy(policy: PolicyConfig) -> PolicyConfig:
    """The policy config with a hub id's commit filled in (downloading it when needed), or
    unchanged for anything else. Called once per run, in the driver."""
    if policy.type != "lerobot":
        return policy
    if not is_hub_id(policy.path):
        if policy.revision is not None or policy.commit is not None:
            flag = "--policy.revision" if policy.revision is not None else "--policy.commit"
            raise ConfigError(
                f"{flag} is for checkpoints on the hub (--policy.path=ORG/NAME); --policy.path={policy.path} "
                f"is a local path"
            )
        return policy
    assert policy.path is not None
    _, commit = resolve(policy.path, policy.commit or policy.revision)
    if policy.commit is None and policy.revision not in (None, commit):
        log.info("%s@%s is commit %s", policy.path, policy.revision, commit)
    timeline.mark("checkpoint_resolved")
    return dataclasses.replace(policy, commit=commit)


def checkpoint_dir(policy: PolicyConfig) -> Path:
    """Where the checkpoint's files are: the directory given, or the cached snapshot of the
    hub id's resolved commit (resolved now when nobody did: a policy built outside a run)."""
    if not is_hub_id(policy.path):
        return Path(policy.path or "")
    assert policy.path is not None
    folder, _ = resolve(policy.path, policy.commit or policy.revision)
    return folder


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"
