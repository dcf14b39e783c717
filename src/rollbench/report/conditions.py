"""A robustness sweep read back (`--eval.perturb`): each condition's episodes, for report and compare.

eval_info.json's `per_task` holds the control's episodes only (LeRobot's keys are the
control's); a condition's episodes are in the episode logs beside it, each line carrying its
`condition`. Condition c's episode `c * per_condition + i` is the control's episode i
perturbed (plan.make_plan), so here it is episode i of its condition: a pair is
(condition, task, i), never (task, episode_index), on which a condition and the control differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rollbench import perturb
from rollbench.report.runs import Episode, LoadedRun, TaskKey, TaskResult, video_in_run
from rollbench.results.log import read_records
from rollbench.results.records import EpisodeRecord
from rollbench.stopping.adaptive import seed_major


def condition_ids(run: LoadedRun) -> list[str] | None:
    """The sweep's conditions (the control, "", first), or None for a run without --eval.perturb."""
    per_cond = run.info.get("per_condition")
    if not isinstance(per_cond, list):
        return None
    return [str(c.get("condition") or "") for c in per_cond if isinstance(c, dict)]


def _per_condition(run: LoadedRun, n_conditions: int) -> int:
    """Episodes of one condition per task: --eval.n_episodes per seed block."""
    cfg = run.config or {}
    n = int((cfg.get("eval") or {}).get("n_episodes") or 0)
    blocks = max(1, len(cfg.get("seeds") or ()))
    if n:
        return n * blocks
    return int(run.info.get("n_planned") or 0) // max(1, n_conditions * len(run.tasks))


def _latest(records: list[EpisodeRecord]) -> dict[tuple[str, str, int, int], EpisodeRecord]:
    """One record per unit, as results.merge keeps it: the first finished one, else a failure."""
    out: dict[tuple[str, str, int, int], EpisodeRecord] = {}
    for rec in sorted(records, key=lambda r: (r.finished_at, r.writer)):
        key = (rec.condition, rec.task_group, rec.task_id, rec.episode_index)
        have = out.get(key)
        if have is None or (not have.ok and rec.ok):
            out[key] = rec
    return out


def _stops(run: LoadedRun, c: int) -> dict[TaskKey, int]:
    """An adaptive sweep's counted prefix of each task under condition `c` (none: every episode)."""
    entry = run.info["per_condition"][c]
    out = {}
    for t in entry.get("per_task") or []:
        n = (t.get("stop") or {}).get("n_episodes")
        if isinstance(n, int):
            out[(t["task_group"], t["task_id"])] = n
    return out


def split(run: LoadedRun) -> dict[str, LoadedRun] | None:
    """Each condition of a sweep as a run of its own (its tasks' episodes numbered from 0 like
    the control's); the control is `run` itself. None: not a sweep, or no episode log under
    its eval_info.json's directory (then only the control's episodes are known). An adaptive
    sweep: only each (task, condition)'s counted prefix (its `stop`), as per_condition counts."""
    ids = condition_ids(run)
    if ids is None:
        return None
    records = _latest(read_records(run.root, recursive=True))  # `rollbench merge`'s shards: a log per directory
    if not any(rec.condition for rec in records.values()):
        return None
    per_condition = _per_condition(run, len(ids))
    seeds = max(1, len((run.config or {}).get("seeds") or ()))
    out: dict[str, LoadedRun] = {}
    for c, cid in enumerate(ids):
        if not cid:
            out[cid] = run
            continue
        cut = _stops(run, c)
        episodes: dict[TaskKey, list[Episode]] = {k: [] for k in run.tasks}
        failed: dict[TaskKey, int] = dict.fromkeys(run.tasks, 0)
        for (rc, group, task_id, index), rec in sorted(records.items()):
            key = (group, task_id)
            if rc != cid or key not in episodes:
                continue
            if key in cut and seed_major(index - c * per_condition, per_condition, seeds) >= cut[key]:
                continue  # past the (task, condition)'s stop: not counted
            if not rec.ok:
                failed[key] += 1
                continue
            episodes[key].append(Episode(index - c * per_condition, rec.success, rec.seed, rec.n_steps,
                                         video_in_run(run.root, rec.video_path)))
        tasks = {k: TaskResult(k, t.name, tuple(episodes[k]), failed[k]) for k, t in run.tasks.items()}
        out[cid] = dataclasses.replace(run, tasks=tasks)
    return out


def axis_levels(per_cond: list[dict[str, Any]]) -> dict[str, list[tuple[float, dict[str, Any]]]]:
    """Each axis of the sweep: (level, the per_condition entry) in level order, the control
    at the axis's rest level."""
    control = next((c for c in per_cond if not c.get("condition")), None)
    out: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for c in per_cond:
        axes = c.get("axes") or {}
        if len(axes) == 1:
            (name, level), = axes.items()
            out.setdefault(name, []).append((float(level), c))
    for name, points in out.items():
        if control is not None and name in perturb.AXES:
            points.append((perturb.AXES[name].neutral, control))
        points.sort(key=lambda p: p[0])
    return out
