"""`eval_info.json`: one typed, versioned result object, built in one place for every way
of running (this process, local shards, Ray actors, a merge).

The body (`per_task`, `per_group`, `overall`, ...) keeps LeRobot's keys and meaning and is
recomputed from the merged episode records (`summary.summarize`); a run with a stop rule
then has each stopped task's rule-aware rate and interval and `overall`/`per_group` as the
mean of the tasks' rates (`_rule_aware`, `results/stopped.py`). What differs between ways of
running is only `how`: the executor's own facts (its scheduling decision, its shard
processes, tune's prediction), each under a key of its own.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy

from rollbench import __version__
from rollbench.policies.lerobot_plugins import lerobot_versions
from rollbench.results import adaptive, stopped
from rollbench.results.merge import Merged
from rollbench.results.store import EVAL_INFO, write_json_atomic
from rollbench.results.summary import busy_seconds, run_facts, seed_results, summarize, timing

if TYPE_CHECKING:
    from rollbench.config.run import RunConfig

#: bump when a key changes meaning or goes away (adding a key is not a new version).
#: 2: every way of running writes the same top-level keys (`EXECUTION_KEYS`, null where they do
#: not apply), and `command` is always the one that reruns the run (for a merge: its shards' run)
SCHEMA_VERSION = 2
#: what a way of running contributes, present in every eval_info.json
EXECUTION_KEYS = ("scheduling", "launch", "tune", "merged_from", "startup", "policy_calls")


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
    """What a way of running did, for `eval_info.json`; every field optional."""

    mode: str  # continuous | lockstep | launch-local | merge
    scheduling: dict[str, Any] | None = None  # the Schedule this process ran with
    launch: dict[str, Any] | None = None  # local shards: their processes and exit codes
    tune: dict[str, Any] | None = None  # --workers=auto: the recommendation and its prediction
    merged_from: int | None = None  # rollbench merge: how many episode directories
    startup: dict[str, float] | None = None  # seconds after the process started (rollbench.timeline)
    policy_calls: dict[str, Any] | None = None  # calls, rows, rows_per_call of the policy in this run


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
        for key in EXECUTION_KEYS:
            out[key] = getattr(self.how, key)
        out["config"] = self.config
        out["versions"] = self.versions
        out["command"] = self.command
        out["this_run_s"] = self.this_run_s
        return out


def build(
    merged: Merged, cfg: RunConfig, root: Path, how: ExecutionFacts,
    command: list[str] | None = None, this_run_s: float | None = None,
    stopping: tuple[adaptive.Rule, adaptive.Applied] | None = None,
) -> EvalInfo:
    """`stopping`: an adaptive run's stop rule and what it counts of `merged` (`adaptive.apply`)."""
    descriptions = {u.task: cfg.env.task_description(u.task) for u in merged.plan}
    if stopping is None:
        body = _control_body(merged, descriptions, root) if len(cfg.eval.conditions) > 1 else summarize(merged, descriptions, root)
    else:
        body = _adaptive_body(*stopping, merged, descriptions, root, len(cfg.eval.conditions) > 1)
    if len(cfg.seeds) > 1:  # of what counts: an adaptive run's prefixes; a sweep's control
        counted = merged if stopping is None else stopping[1].merged
        seed_results(body, control_only(counted) if len(cfg.eval.conditions) > 1 else counted, cfg.seeds, cfg.eval.n_episodes)
    return EvalInfo(body, cfg.to_dict(), versions(cfg), how, command, this_run_s)


def control_only(merged: Merged) -> Merged:
    """A sweep's control: its units and their records (--eval.perturb's conditions left out)."""
    plan = [u for u in merged.plan if not u.condition]
    keys = {u.key for u in plan}
    return Merged(plan, {k: r for k, r in merged.records.items() if k in keys}, merged.duplicates,
                  [(a, b) for a, b in merged.conflicts if a.key in keys])


def _control_body(merged: Merged, descriptions: dict[str, str], root: Path) -> dict[str, Any]:
    """A sweep's body: LeRobot's keys (per_task, per_group, overall) are the control's, as a
    run without --eval.perturb gives them; whether the run is complete, what is missing and
    how long it took are the whole run's (report/sweep.py adds each condition's results)."""
    body = summarize(control_only(merged), descriptions, root)
    body.update(run_facts(merged))
    body["overall"].update(timing(merged))
    return body


def _adaptive_body(
    rule: adaptive.Rule, applied: adaptive.Applied, merged: Merged, descriptions: dict[str, str], root: Path,
    sweep: bool = False,
) -> dict[str, Any]:
    """Only each task's counted prefix, with why it stopped; the time of every episode run.
    A sweep: the LeRobot keys are the control's (each task's control prefix and its stop);
    `adaptive` counts every (task, condition)'s stop (report/sweep.py gives each condition's)."""
    body = (_control_body if sweep else summarize)(applied.merged, descriptions, root)
    for entry in body["per_task"]:
        key = rule.key(entry["task_group"], entry["task_id"], "")
        entry["stop"] = adaptive.stop_json(rule, applied.stops[key], applied.past_stop.get(key, 0))
    eval_s = busy_seconds(list(merged.records.values()))  # episodes past a stop took time too
    counted = sum(r.ok for r in applied.merged.records.values()) if sweep else body["overall"]["n_episodes"]
    body["overall"]["eval_s"] = eval_s
    body["overall"]["eval_ep_s"] = eval_s / max(1, counted)
    _rule_aware(rule, applied, body)
    stops = applied.stops.values()
    body["adaptive"] = {
        **rule.to_json(),
        "tasks_stopped_early": sum(s.reason not in ("running", "max_episodes") and (s.n_episodes or 0) < rule.max_episodes
                                   for s in stops),
        "tasks_running": sum(s.reason == "running" for s in stops),
        "episodes_saved": sum(rule.max_episodes - s.n_episodes for s in stops if s.n_episodes is not None),
        "episodes_ran_past_stop": sum(applied.past_stop.values()),
    }
    if sweep:  # the counts above are of (task, condition) stops
        body["adaptive"]["stops_per_task"] = len({key[2:] for key in applied.stops})
    return body


def _rule_aware(rule: adaptive.Rule, applied: adaptive.Applied, body: dict[str, Any]) -> None:
    """Numbers that hold under the rule that stopped each task (the fixed-n Wilson interval
    stays as `stop.wilson_ci95`); a group's and the run's rate is the mean of their tasks'
    rates with its standard error (pooling would weigh the tasks that ran longer more).

    --eval.ci_width: the rule's exact interval and its unbiased rate (results/stopped.py).
    --eval.versus: the stop depends on the other run's episodes too, so no exact interval of
    this run's rate alone exists; the anytime-valid betting interval of its episodes, in
    order, covers the rate under any stopping rule (wider); the rate stays the prefix's k/n,
    whose bias under this rule is not corrected."""
    outcomes = adaptive.outcomes_of(rule, applied.merged.records.values())
    width = isinstance(rule, adaptive.StopRule)
    by_group: dict[str, list[stopped.TaskEstimate]] = {}
    by_index: dict[str, list[list[bool | None]]] = {}  # the counted outcomes, for the tasks' covariance
    for entry in body["per_task"]:
        key = rule.key(entry["task_group"], entry["task_id"], "")  # a sweep's: the control's
        seen, cut = outcomes.get(key, {}), applied.stops[key].n_episodes
        est = rule_aware_estimate(rule, applied.stops[key], seen, entry["n_success"], entry["n_episodes"])
        if est is None:
            est = stopped.fixed_estimate(entry["n_success"], entry["n_episodes"])
        else:
            entry["stop"]["wilson_ci95"] = entry["pc_success_ci95"]
            if width:
                entry["stop"]["pc_success_unbiased"] = 100.0 * est.rate
            entry["pc_success_ci95"] = entry["summary"]["pc_success_ci95"] = [100.0 * est.ci[0], 100.0 * est.ci[1]]
        if est is not None:
            by_group.setdefault(entry["task_group"], []).append(est)
            counted = range(cut if cut is not None else max(seen, default=-1) + 1)
            by_index.setdefault(entry["task_group"], []).append([seen.get(i) for i in counted])
    everything = [t for ts in by_group.values() for t in ts]
    all_index = [o for os in by_index.values() for o in os]
    groups = [(body["per_group"].get(g), ts, by_index[g]) for g, ts in by_group.items()]
    for where, tasks, seeded in [*groups, (body["overall"], everything, all_index)]:
        if where is None or not tasks:
            continue
        mean, se, ci = stopped.mean_of_rates(tasks, seeded)
        where["pc_success_pooled"] = where["pc_success"]
        where["pc_success"] = 100.0 * mean
        where["pc_success_se"] = 100.0 * se
        where["pc_success_ci95"] = [100.0 * ci[0], 100.0 * ci[1]]
        where["pc_success_of"] = f"the mean of {len(tasks)} tasks' {'unbiased ' if width else ''}rates"


def rule_aware_estimate(
    rule: adaptive.Rule, stop: adaptive.TaskStop, seen: Mapping[int, bool | None], n_success: int, n_episodes: int,
) -> stopped.TaskEstimate | None:
    """A stopped key's rate and interval under its rule (see `_rule_aware`); None while running."""
    if stop.n_episodes is not None and isinstance(rule, adaptive.StopRule):
        return stopped.task_estimate(rule.ci_width, rule.checkpoints(), seen, stop.n_episodes)
    if stop.n_episodes is not None and n_episodes:
        fixed = stopped.fixed_estimate(n_success, n_episodes)
        in_order = [bool(seen[i]) for i in sorted(seen) if i < stop.n_episodes and seen[i] is not None]
        return fixed and stopped.TaskEstimate(fixed.rate, stopped.anytime_interval(in_order), fixed.variance)
    return None


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
