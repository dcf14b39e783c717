"""Checkpoints given as hub ids: `--policy.path=ORG/NAME [--policy.revision=REV]`.

A `--policy.path` that is not an existing path and reads `ORG/NAME` is a repository on the
Hugging Face hub, as lerobot-eval takes it. The driver resolves it once, before any output
is written (`resolve_policy`, with `rollbench.hub`), and the commit it landed on goes into
the config as `--policy.commit`. From then on every process of the run (the driver's
policy, shard processes, `rollbench check`, `serve`, `tune`) finds the checkpoint by that
commit in the cache (`checkpoint_dir`), with no request to the hub.

The commit, not the branch, is part of a run's identity: when `main` has moved since a run
started, rerunning its command does not mix the two checkpoints' episodes in one log; it
stops and names the commit that finishes the run (`--policy.revision=<commit>`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from rollbench import hub, timeline
from rollbench.config.policy import PolicyConfig
from rollbench.errors import ConfigError

log = logging.getLogger(__name__)

#: what a LeRobot checkpoint needs (the processors' stats are safetensors files beside them)
REQUIRED_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")
#: what is downloaded of a repository: configs, processor pipelines, weights and stats,
#: the model card; not training state or anything else a repository may carry
PATTERNS = ("*.json", "*.safetensors", "README.md")
WHAT = (f"a LeRobot policy checkpoint holds {', '.join(REQUIRED_FILES)} (LeRobot >= 0.4 saves the processor "
        f"pipelines beside the weights)")


def _resolve(policy: PolicyConfig) -> tuple[Path, str]:
    assert policy.path is not None
    revision = policy.commit or policy.revision
    where = f"--policy.path={policy.path}" + (f" --policy.revision={policy.revision}" if policy.revision else "")
    return hub.resolve(policy.path, revision, where, REQUIRED_FILES, WHAT, PATTERNS)


def resolve_policy(policy: PolicyConfig) -> PolicyConfig:
    """The policy config with a hub id's commit filled in (downloading it when needed), or
    unchanged for anything else. Called once per run, in the driver."""
    if policy.type != "lerobot":
        return policy
    if not hub.is_hub_id(policy.path):
        if policy.revision is not None or policy.commit is not None:
            flag = "--policy.revision" if policy.revision is not None else "--policy.commit"
            raise ConfigError(
                f"{flag} is for checkpoints on the hub (--policy.path=ORG/NAME); --policy.path={policy.path} "
                f"is a local path"
            )
        return policy
    _, commit = _resolve(policy)
    if policy.commit is None and policy.revision not in (None, commit):
        log.info("%s@%s is commit %s", policy.path, policy.revision, commit)
    timeline.mark("checkpoint_resolved")
    return dataclasses.replace(policy, commit=commit)


def checkpoint_dir(policy: PolicyConfig) -> Path:
    """Where the checkpoint's files are: the directory given, or the cached snapshot of the
    hub id's resolved commit (resolved now when nobody did: a policy built outside a run)."""
    if not hub.is_hub_id(policy.path):
        return Path(policy.path or "")
    folder, _ = _resolve(policy)
    return folder
