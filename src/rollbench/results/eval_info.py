"""`eval_info.json`: one typed, versioned result object, built whole in one place for every
way of running (this process, local shards, Ray actors, a merge): `rollbench/close.py`.

The body (`per_task`, `per_group`, `overall`, ...) keeps LeRobot's keys and meaning and is
recomputed from the merged episode records (`summary_body`); the close adds its sections (a
stop rule's estimates: `stopping/section.py`; a sweep's `per_condition`: `results/sweep.py`;
a recording's `dataset`) before the EvalInfo is made. What differs between ways of running
is only `how`: the executor's own facts (its scheduling decision, its shard processes,
tune's prediction), each under a key of its own.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy

from rollbench.policies.lerobot_plugins import lerobot_versions
from rollbench.results.merge import Merged
from rollbench.results.store import EVAL_INFO, write_json_atomic
from rollbench.results.summary import run_facts, summarize, timing
from rollbench.version import __version__

if TYPE_CHECKING:
    from rollbench.config.run import RunConfig

#: bump when a key changes meaning or goes away (adding a key is not a new version).
#: 2: every way of running writes the same top-level keys (`EXECUTION_KEYS`, null where they do
#: not apply), and `command` is always the one that reruns the run (for a merge: its shards' run)
#: 3: one shape whatever ran the units: `mode` is the scheduling mode (continuous | lockstep;
#: null where no Schedule ran them: a merge, a plugin without one), `scheduling` the Schedule's
#: keys alone (or null), and what differs between executors is under `executor` ({"name": ...,
#: the shard processes, the Ray cluster, the merged directories}); `launch` and `merged_from`
#: moved there
#: 4: the shard launcher is an executor of its own, `--executor=shards`, and `executor.name` says
#: so (`shards`; it was `launch-local`, under `--launch=local`); `config` has no `launch`
SCHEMA_VERSION = 4
#: what a way of running contributes, present in every eval_info.json
EXECUTION_KEYS = ("executor", "scheduling", "tune", "startup", "policy_calls")


def versions(cfg: RunConfig) -> dict[str, str]:
    out = {
        "rollbench": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "gymnasium": gymnasium.__version__,
        **cfg.env.package_versions(),
    }
    if cfg.policy.type == "lerobot":  # LeRobot and the policy plugins it imported, and what they replaced in it
        out.update(lerobot_versions())
    return out


@dataclass(frozen=True)
class ExecutionFacts:
    """What a way of running did, for `eval_info.json`; every field but the executor optional."""

    executor: str  # local | shards | ray | merge | a plugin's name (the --executor that ran it, or merge)
    scheduling: dict[str, Any] | None = None  # the Schedule the units ran with (its keys alone)
    detail: dict[str, Any] | None = None  # what only this executor has: shard processes, the cluster, ...
    tune: dict[str, Any] | None = None  # --workers=auto: the recommendation and its prediction
    startup: dict[str, float] | None = None  # seconds after the process started (rollbench.timeline)
    policy_calls: dict[str, Any] | None = None  # calls, rows, rows_per_call of the policy in this run

    @property
    def mode(self) -> str | None:
        """How the units were scheduled (continuous | lockstep), or None where no Schedule ran them."""
        return None if self.scheduling is None else self.scheduling.get("mode")


@dataclass(frozen=True)
class EvalInfo:
    """The whole of `eval_info.json`."""

    body: dict[str, Any]  # status, per_task, per_group, overall, n_planned, missing_units, ...
    config: dict[str, Any]
    versions: dict[str, str]
    how: ExecutionFacts
    command: list[str] | None = None  # the argv of the rollbench command that wrote it
    this_run_s: float | None = None  # wall time of the command that wrote it
    schema_version: int = field(default=SCHEMA_VERSION)

    @property
    def status(self) -> str:
        return str(self.body["status"])

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def __getitem__(self, key: str) -> Any:
        """Read it as the JSON reads (`info["overall"]["pc_success"]`)."""
        return self.to_json()[key]

    def to_json(self) -> dict[str, Any]:
        """The same top-level keys whichever way the run ran (one process, local shards, a
        merge, Ray): a key that does not apply is null."""
        out: dict[str, Any] = {"schema_version": self.schema_version, **self.body}
        out["mode"] = self.how.mode
        out["executor"] = {"name": self.how.executor, **(self.how.detail or {})}
        for key in EXECUTION_KEYS[1:]:
            out[key] = getattr(self.how, key)
        out["config"] = self.config
        out["versions"] = self.versions
        out["command"] = self.command
        out["this_run_s"] = self.this_run_s
        return out


def summary_body(counted: Merged, cfg: RunConfig, root: Path) -> dict[str, Any]:
    """LeRobot's keys of the records that count (`summary.summarize`); a sweep's are its
    control's (`_control_body`). A stop rule's estimates, a sweep's `per_condition` and a
    recording's `dataset` are the close's sections (rollbench/close.py)."""
    descriptions = {u.task: cfg.env.task_description(u.task) for u in counted.plan}
    return (_control_body if cfg.eval.is_sweep else summarize)(counted, descriptions, root)


def control_only(merged: Merged) -> Merged:
    """A sweep's control: its units and their records (--eval.perturb's conditions left out)."""
    plan = [u for u in merged.plan if not u.condition]
    keys = {u.key for u in plan}
    return Merged(plan, {k: r for k, r in merged.records.items() if k in keys}, merged.duplicates,
                  [(a, b) for a, b in merged.conflicts if a.key in keys])


def _control_body(merged: Merged, descriptions: dict[str, str], root: Path) -> dict[str, Any]:
    """A sweep's body: LeRobot's keys (per_task, per_group, overall) are the control's, as a
    run without --eval.perturb gives them; whether the run is complete, what is missing and
    how long it took are the whole run's (results/sweep.py gives each condition's results)."""
    body = summarize(control_only(merged), descriptions, root)
    body.update(run_facts(merged))
    body["overall"].update(timing(merged))
    return body


def write(root: Path, info: EvalInfo) -> Path:
    path = root / EVAL_INFO
    write_json_atomic(path, info.to_json())
    return path


def read(root: Path) -> dict[str, Any] | None:
    """The `eval_info.json` an earlier close of the run in `root` wrote, or None if there is
    none or it does not parse (`report` reads runs with its own, user-facing errors)."""
    try:
        info = json.loads((root / EVAL_INFO).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None
