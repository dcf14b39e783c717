"""A robustness sweep's analysis (`--eval.perturb`): each condition against the control.

eval_info.json's LeRobot keys (per_task, per_group, overall) are the control's; this adds
`per_condition`, one entry per condition, the control first:

    {"condition": "action.noise=0.2", "axes": {"action.noise": 0.2},
     n_episodes, n_success, pc_success, pc_success_ci95 (Wilson),
     "vs_control": {n_pairs, both, only_control, only_condition, neither,
                    difference_pc (condition - control), difference_ci95 (exact conditional, the interval of exact McNemar),
                    p_mcnemar (exact, two-sided), p_holm (Holm over the conditions)},
     "per_task": [{task_group, task_id, task, the same figures for that task}]}

Pairs are (task, i): the condition's episode i and the control's episode i ran on the same
seed and episode index (plan.make_plan), so the exact McNemar test on the discordant pairs
is the test of "this condition changes the success rate". Holm keeps the family-wise error
over the conditions at 5%.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from rollbench import perturb
from rollbench.plan import EpisodeUnit
from rollbench.results.merge import Merged
from rollbench.results.records import EpisodeRecord
from rollbench.results.summary import aggregate
from rollbench.stats import Paired, holm, mcnemar_exact, mcnemar_interval


def _rate(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    agg = aggregate(records)
    return {k: agg[k] for k in ("n_episodes", "n_success", "pc_success", "pc_success_ci95", "avg_sum_reward")}


def _versus(t: Paired) -> dict[str, Any]:
    if not t.n:
        return {"n_pairs": 0}
    lo, hi = mcnemar_interval(t, 0.05)  # excludes 0 exactly when p_mcnemar < 0.05 (issue 47)
    return {
        "n_pairs": t.n, "both": t.both, "only_control": t.only_a, "only_condition": t.only_b, "neither": t.neither,
        "difference_pc": 100.0 * (t.k_b - t.k_a) / t.n, "difference_ci95": [100.0 * lo, 100.0 * hi],
        "p_mcnemar": mcnemar_exact(t),
    }


def _finished(merged: Merged, conditions: Sequence[str]) -> dict[str, list[EpisodeRecord]]:
    """Each condition's finished, ok records, in plan order."""
    units: dict[str, list[EpisodeUnit]] = defaultdict(list)
    for unit in merged.plan:
        units[unit.condition].append(unit)
    return {cid: [merged.records[u.key] for u in units[cid] if u.key in merged.records and merged.records[u.key].ok]
            for cid in conditions}


def per_condition(
    merged: Merged, conditions: Sequence[str], n_per_condition: int,
    stop_of: Callable[[Sequence[EpisodeRecord], str], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The `per_condition` section of a sweep whose plan is `merged.plan` (finished, ok
    episodes only; a unit still missing or failed has no pair). `stop_of`: an adaptive
    sweep's (`merged` is then each (task, condition)'s counted prefix): each task's entry
    carries its `stop` (stopping/section.py's `condition_stops`)."""
    recs = _finished(merged, conditions)
    # pairs: (task_group, task_id, index of the episode within its condition)
    outcomes = {cid: {(r.task_group, r.task_id, r.episode_index % n_per_condition): r.success for r in mine}
                for cid, mine in recs.items()}
    control = outcomes[""]
    out = []
    for cid in conditions:
        tasks: dict[tuple[str, int], list[EpisodeRecord]] = defaultdict(list)
        for r in recs[cid]:
            tasks[(r.task_group, r.task_id)].append(r)
        per_task = []
        for (group, task_id), mine in sorted(tasks.items(), key=lambda kv: kv[0]):
            entry: dict[str, Any] = {"task_group": group, "task_id": task_id, "task": mine[0].task, **_rate(mine)}
            if stop_of is not None:
                entry["stop"] = stop_of(mine, cid)
            if cid:
                only = {k: v for k, v in outcomes[cid].items() if k[:2] == (group, task_id)}
                entry["vs_control"] = _versus(Paired.of(control, only))
            per_task.append(entry)
        item: dict[str, Any] = {"condition": cid, "axes": perturb.condition(cid).to_json(), **_rate(recs[cid])}
        if cid:
            item["vs_control"] = _versus(Paired.of(control, outcomes[cid]))
        item["per_task"] = per_task
        out.append(item)
    tested = [c for c in out if c["condition"] and "p_mcnemar" in c["vs_control"]]
    for c, p in zip(tested, holm([c["vs_control"]["p_mcnemar"] for c in tested]), strict=True):
        c["vs_control"]["p_holm"] = p
    return out
