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
from collections.abc import Sequence
from typing import Any

from rollbench import perturb
from rollbench.plan import EpisodeUnit
from rollbench.report.stats import Paired, holm, mcnemar_exact, mcnemar_interval
from rollbench.results import adaptive
from rollbench.results.eval_info import rule_aware_estimate
from rollbench.results.merge import Merged
from rollbench.results.records import EpisodeRecord
from rollbench.results.summary import aggregate

Pair = tuple[str, int, int]  # (task_group, task_id, index of the episode within its condition)


def _rate(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    agg = aggregate(records)
    return {k: agg[k] for k in ("n_episodes", "n_success", "pc_success", "pc_success_ci95", "avg_sum_reward")}


def _paired(control: dict[Pair, bool], mine: dict[Pair, bool]) -> Paired:
    both = only_c = only_m = neither = 0
    for key, ok in mine.items():
        if key not in control:
            continue
        ref = control[key]
        both += ref and ok
        only_c += ref and not ok
        only_m += ok and not ref
        neither += not ref and not ok
    return Paired(both, only_c, only_m, neither)


def _versus(t: Paired) -> dict[str, Any]:
    if not t.n:
        return {"n_pairs": 0}
    lo, hi = mcnemar_interval(t, 0.05)  # excludes 0 exactly when p_mcnemar < 0.05 (issue 47)
    return {
        "n_pairs": t.n, "both": t.both, "only_control": t.only_a, "only_condition": t.only_b, "neither": t.neither,
        "difference_pc": 100.0 * (t.k_b - t.k_a) / t.n, "difference_ci95": [100.0 * lo, 100.0 * hi],
        "p_mcnemar": mcnemar_exact(t),
    }


def per_condition(
    merged: Merged, conditions: Sequence[str], n_per_condition: int,
    stopping: tuple[adaptive.Rule, adaptive.Applied] | None = None,
) -> list[dict[str, Any]]:
    """The `per_condition` section of a sweep whose plan is `merged.plan` (finished, ok
    episodes only; a unit still missing or failed has no pair). `stopping`: an adaptive
    sweep's rule and what it counted (`merged` is then `Applied.merged`, each (task,
    condition)'s prefix): each task's entry carries its `stop`."""
    units: dict[str, list[EpisodeUnit]] = defaultdict(list)
    for unit in merged.plan:
        units[unit.condition].append(unit)
    outcomes: dict[str, dict[Pair, bool]] = {}
    recs: dict[str, list[EpisodeRecord]] = {}
    for cid in conditions:
        mine = [merged.records[u.key] for u in units[cid] if u.key in merged.records and merged.records[u.key].ok]
        recs[cid] = mine
        outcomes[cid] = {(r.task_group, r.task_id, r.episode_index % n_per_condition): r.success for r in mine}
    control = outcomes[""]
    # an adaptive sweep: every counted unit by its key, failed ones (None) included
    seen = {} if stopping is None else adaptive.outcomes_of(stopping[0], merged.records.values())
    out = []
    for cid in conditions:
        tasks: dict[tuple[str, int], list[EpisodeRecord]] = defaultdict(list)
        for r in recs[cid]:
            tasks[(r.task_group, r.task_id)].append(r)
        per_task = []
        for (group, task_id), mine in sorted(tasks.items(), key=lambda kv: kv[0]):
            entry: dict[str, Any] = {"task_group": group, "task_id": task_id, "task": mine[0].task, **_rate(mine)}
            if stopping is not None:
                entry["stop"] = _stop(*stopping, seen, mine, cid)
            if cid:
                only = {k: v for k, v in outcomes[cid].items() if k[:2] == (group, task_id)}
                entry["vs_control"] = _versus(_paired(control, only))
            per_task.append(entry)
        item: dict[str, Any] = {"condition": cid, "axes": perturb.condition(cid).to_json(), **_rate(recs[cid])}
        if cid:
            item["vs_control"] = _versus(_paired(control, outcomes[cid]))
        item["per_task"] = per_task
        out.append(item)
    tested = [c for c in out if c["condition"] and "p_mcnemar" in c["vs_control"]]
    for c, p in zip(tested, holm([c["vs_control"]["p_mcnemar"] for c in tested]), strict=True):
        c["vs_control"]["p_holm"] = p
    return out


def _stop(rule: adaptive.Rule, applied: adaptive.Applied, outcomes: adaptive.Outcomes, mine: Sequence[EpisodeRecord],
          cid: str) -> dict[str, Any]:
    """A (task, condition)'s `stop` entry, as a task's in eval_info's per_task, with its
    rate and interval under the rule (eval_info.rule_aware_estimate)."""
    key = rule.key(mine[0].task_group, mine[0].task_id, cid)
    stop = applied.stops[key]
    out = adaptive.stop_json(rule, stop, applied.past_stop.get(key, 0))
    est = rule_aware_estimate(rule, stop, outcomes.get(key, {}), sum(r.success for r in mine), len(mine))
    if est is not None:
        if isinstance(rule, adaptive.StopRule):
            out["pc_success_unbiased"] = 100.0 * est.rate
        out["pc_success_ci95_rule_aware"] = [100.0 * est.ci[0], 100.0 * est.ci[1]]
    return out


def lines(per_cond: Sequence[dict[str, Any]]) -> list[str]:
    """The closing lines of a sweep: each condition's rate and its difference from the control."""
    out = ["condition                      episodes  success %  95% CI          vs control (pts, 95% CI)   p (Holm)"]
    for c in per_cond:
        ci = c["pc_success_ci95"]
        rate = f"{c['pc_success']:9.1f}" if c["pc_success"] is not None else "        -"
        cis = f"[{ci[0]:5.1f}, {ci[1]:5.1f}]" if ci else "-"
        v = c.get("vs_control")
        if v is None:
            diff = "(control)"
            p = ""
        elif v.get("n_pairs"):
            lo, hi = v["difference_ci95"]
            diff = f"{v['difference_pc']:+6.1f} [{lo:+6.1f}, {hi:+6.1f}]"
            p = f"{v.get('p_holm', v['p_mcnemar']):.3g}"
        else:
            diff, p = "no pairs yet", ""
        out.append(f"{(c['condition'] or 'control'):30s} {c['n_episodes']:8d}  {rate}  {cis:14s}  {diff:25s}  {p}")
    return out
