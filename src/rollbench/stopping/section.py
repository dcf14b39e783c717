"""A stop rule's part of `eval_info.json`: each stopped task's `stop`, the numbers that hold
under the rule (a task's rate and interval, a group's and the run's mean of the tasks' rates),
and the `adaptive` section. The close (rollbench/close.py) applies it to the body of the
records that count, before the EvalInfo is made."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rollbench.results.merge import Merged
from rollbench.results.records import EpisodeRecord
from rollbench.results.summary import busy_seconds
from rollbench.stopping import adaptive
from rollbench.stopping import estimates as stopped


def add_stops(rule: adaptive.Rule, applied: adaptive.Applied, merged: Merged, body: dict[str, Any], sweep: bool) -> None:
    """`body`: the summary of each task's counted prefix (`applied.merged`); adds why each
    stopped and the time of every episode run (`merged`: past a stop too). A sweep: the
    LeRobot keys are the control's (each task's control prefix and its stop); `adaptive`
    counts every (task, condition)'s stop (`condition_stops` gives each condition's)."""
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


def _rule_aware(rule: adaptive.Rule, applied: adaptive.Applied, body: dict[str, Any]) -> None:
    """Numbers that hold under the rule that stopped each task (the fixed-n Wilson interval
    stays as `stop.wilson_ci95`); a group's and the run's rate is the mean of their tasks'
    rates with its standard error (pooling would weigh the tasks that ran longer more).

    --eval.ci_width: the rule's exact interval and its unbiased rate (stopping/estimates.py).
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
    _means_of_tasks(body, by_group, by_index, width)


def _means_of_tasks(body: dict[str, Any], by_group: dict[str, list[stopped.TaskEstimate]],
                    by_index: dict[str, list[list[bool | None]]], width: bool) -> None:
    """Each group's and the run's rate as the mean of its tasks' (their covariance from the
    counted outcomes by index), in place of the pooled k/n, which stays as `pc_success_pooled`."""
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


def condition_stops(rule: adaptive.Rule, applied: adaptive.Applied) -> Callable[[Sequence[EpisodeRecord], str], dict[str, Any]]:
    """For a sweep's `per_condition`: a (task, condition)'s `stop` entry from its counted
    records, as a task's in per_task, with its rate and interval under the rule."""
    seen = adaptive.outcomes_of(rule, applied.merged.records.values())  # failed units (None) included

    def stop_of(mine: Sequence[EpisodeRecord], cid: str) -> dict[str, Any]:
        key = rule.key(mine[0].task_group, mine[0].task_id, cid)
        stop = applied.stops[key]
        out = adaptive.stop_json(rule, stop, applied.past_stop.get(key, 0))
        est = rule_aware_estimate(rule, stop, seen.get(key, {}), sum(r.success for r in mine), len(mine))
        if est is not None:
            if isinstance(rule, adaptive.StopRule):
                out["pc_success_unbiased"] = 100.0 * est.rate
            out["pc_success_ci95_rule_aware"] = [100.0 * est.ci[0], 100.0 * est.ci[1]]
        return out

    return stop_of
