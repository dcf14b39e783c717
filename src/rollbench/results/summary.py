"""Aggregates and `eval_info.json`, always derived from the merged episode records.

Keys and meaning follow LeRobot's `eval_info.json` (`per_task`, `per_group`, `overall`,
`avg_sum_reward`, `avg_max_reward`, `pc_success`, `n_episodes`, `eval_s`, `eval_ep_s`), and
LeRobot main's since #4628: `n_success` and `pc_success_ci95` (Wilson score interval, percent,
unrounded) in `per_group` and `overall`, and those with `n_episodes` and `pc_success` at the top of
each `per_task` entry; plus ours: `n_failed`, `avg_episode_length`, `status`, a `summary` per task. Episodes that failed for infrastructure reasons (a crashed
or hung worker, after retries) are not policy failures: they are left out of the rates and
counted in `n_failed`. The JSON never holds NaN or Infinity: undefined values are null.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollbench.plan import EpisodeUnit
from rollbench.results.merge import Merged
from rollbench.results.records import EpisodeRecord
from rollbench.stats import wilson

#: what LeRobot main (after 0.6.1, #4628) adds to each `per_task` entry; `per_group` and `overall`
#: carry them too, in `aggregate`'s order (LeRobot's: `n_success` and `pc_success_ci95` after `n_episodes`)
LEROBOT_TASK_KEYS = ("n_episodes", "n_success", "pc_success", "pc_success_ci95")


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def aggregate(records: Sequence[EpisodeRecord], n_failed: int = 0) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    n = len(ok)
    k = sum(r.success for r in ok)
    ci = wilson(k, n)
    return {
        "avg_sum_reward": _mean([r.sum_reward for r in ok]),
        "avg_max_reward": _mean([r.max_reward for r in ok]),
        "pc_success": 100.0 * k / n if n else None,
        "n_episodes": n,
        "n_success": k,
        "pc_success_ci95": [100.0 * ci[0], 100.0 * ci[1]] if ci else None,
        "n_failed": n_failed,
        "avg_episode_length": _mean([float(r.n_steps) for r in ok]),
    }


def busy_seconds(records: Sequence[EpisodeRecord]) -> float:
    """Wall time the run spent, from the log: the union of each writer's active span."""
    spans: dict[str, list[float]] = {}
    for r in records:
        if not r.finished_at:
            continue
        start = r.finished_at - r.wall_s
        lo_hi = spans.setdefault(r.writer, [start, r.finished_at])
        lo_hi[0] = min(lo_hi[0], start)
        lo_hi[1] = max(lo_hi[1], r.finished_at)
    total, end = 0.0, -math.inf
    for lo, hi in sorted(spans.values()):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def summarize(merged: Merged, descriptions: dict[str, str] | None = None, root: Path | None = None) -> dict[str, Any]:
    """The `eval_info.json` body (without config and versions).

    `video_paths` lists the videos (relative to the output dir) of the task's episodes
    that exist under `root`: a video whose writer was killed before it finished is absent.
    """
    descriptions = descriptions or {}
    by_task: dict[tuple[str, int], list[EpisodeUnit]] = defaultdict(list)
    for unit in merged.plan:
        by_task[(unit.task_group, unit.task_id)].append(unit)

    per_task = []
    group_records: dict[str, list[EpisodeRecord]] = defaultdict(list)
    group_failed: dict[str, int] = defaultdict(int)
    for (group, _), units in by_task.items():
        recs = [merged.records[u.key] for u in units if u.key in merged.records]
        ok = [r for r in recs if r.ok]
        failed = [r for r in recs if not r.ok]
        group_records[group].extend(ok)
        group_failed[group] += len(failed)
        per_task.append(_task_entry(units[0], descriptions.get(units[0].task, units[0].task), ok, failed, root))
    per_group = {
        g: {**aggregate(recs, group_failed[g]), "video_paths": _videos(recs, root)} for g, recs in group_records.items()
    }
    all_ok = [r for recs in group_records.values() for r in recs]
    overall = {**aggregate(all_ok, len(merged.failed)), **timing(merged), "video_paths": _videos(all_ok, root)}
    facts = run_facts(merged)
    return {"status": facts.pop("status"), "per_task": per_task, "per_group": per_group, "overall": overall, **facts}


def _videos(recs: Sequence[EpisodeRecord], root: Path | None) -> list[str]:
    """The video paths of `recs` (relative to the output dir) whose files exist under `root`
    (every one of them without a `root`)."""
    return [r.video_path for r in recs if r.video_path and (root is None or (root / r.video_path).is_file())]


def _task_entry(unit: EpisodeUnit, description: str, ok: list[EpisodeRecord], failed: list[EpisodeRecord],
                root: Path | None) -> dict[str, Any]:
    """The `per_task` entry of `unit`'s task: its finished episodes' (`ok`) counts, rates and
    metrics, and the units that `failed`."""
    summary = aggregate(ok, len(failed))
    return {
        "task_group": unit.task_group,
        "task_id": unit.task_id,
        "task": unit.task,
        "description": description,
        # LeRobot main's per-task counts and interval (#4628), at the top of the entry
        **{key: summary[key] for key in LEROBOT_TASK_KEYS},
        "metrics": {
            "sum_rewards": [r.sum_reward for r in ok],
            "max_rewards": [r.max_reward for r in ok],
            "successes": [r.success for r in ok],
            "video_paths": _videos(ok, root),
            "seeds": [r.seed for r in ok],
            "episode_ix": [r.episode_index for r in ok],
            "n_steps": [r.n_steps for r in ok],
        },
        "summary": summary,
        "failed": [{"episode_index": r.episode_index, "seed": r.seed, "error": r.error} for r in failed],
    }


def timing(merged: Merged) -> dict[str, float]:
    """`overall`'s `eval_s` (the wall time of every episode in the log, `busy_seconds`) and
    `eval_ep_s` (that per finished episode)."""
    eval_s = busy_seconds(list(merged.records.values()))
    return {"eval_s": eval_s, "eval_ep_s": eval_s / max(1, sum(r.ok for r in merged.records.values()))}


def run_facts(merged: Merged) -> dict[str, Any]:
    """What the body says of the run as a whole beside its rates: whether it is complete, what
    it planned and what is missing, what its logs held twice or disagreed on."""
    return {
        "status": "complete" if merged.complete else "partial",
        "n_planned": len(merged.plan),
        "missing_units": [
            {"task_group": u.task_group, "task_id": u.task_id, "task": u.task, "episode_index": u.episode_index,
             **({"condition": u.condition} if u.condition else {})}
            for u in merged.missing
        ],
        "duplicates_ignored": merged.duplicates,
        "conflicts": [
            {
                "task_group": a.task_group, "task_id": a.task_id, "episode_index": a.episode_index,
                "kept": {"writer": a.writer, "outcome": list(a.outcome())},
                "other": {"writer": b.writer, "outcome": list(b.outcome())},
            }
            for a, b in merged.conflicts
        ],
    }


def seed_results(body: dict[str, Any], merged: Merged, seeds: Sequence[int], n_episodes: int) -> None:
    """--seeds: each task's and the whole run's results per seed (seed j's block is episodes
    j * n_episodes ..). Across seeds the headline is the pooled rate with its Wilson interval
    (`overall`'s): for one checkpoint the seed blocks differ only by which episodes ran, and
    "mean +- std over 3 seeds" covers the true rate only ~77% of the time where the pooled
    interval covers ~95% (issue 35). The mean and sample std of the per-seed rates stay, beside
    the std that episode noise alone would give (a larger spread says the seeds matter)."""
    ok_by_task: dict[tuple[str, int], list[EpisodeRecord]] = defaultdict(list)
    for rec in merged.records.values():
        if rec.ok:
            ok_by_task[(rec.task_group, rec.task_id)].append(rec)
    for entry in body["per_task"]:
        entry["per_seed"] = _seed_blocks(ok_by_task[(entry["task_group"], entry["task_id"])], seeds, n_episodes)
    overall = _seed_blocks([r for recs in ok_by_task.values() for r in recs], seeds, n_episodes)
    rates = [b["pc_success"] for b in overall if b["pc_success"] is not None]
    mean = sum(rates) / len(rates) if rates else None
    std = math.sqrt(sum((x - mean) ** 2 for x in rates) / (len(rates) - 1)) if mean is not None and len(rates) > 1 else None
    body["per_seed"] = overall
    pooled = body["overall"]
    # what the per-seed rates would spread by if the seeds only changed which episodes ran
    # (one checkpoint: every seed block estimates the same rate, with binomial noise). A block's
    # rate pools tasks of different rates: its variance is sum_t m_t p_t (1 - p_t) / M^2 (m_t:
    # the task's episodes per block, M their sum), below the pooled p(1 - p) / M, which counts
    # the spread between the tasks' rates as noise (issue 47: 5.16 where it is 4.34)
    noise = _block_noise(body["per_task"], len(seeds))
    body["across_seeds"] = {
        "seeds": list(seeds), "n_seeds": len(seeds),  # every seed given: a seed with no finished episode pools none
        # the headline: every seed's episodes pooled, with the Wilson interval of `overall`
        "pc_success": pooled["pc_success"], "pc_success_ci95": pooled["pc_success_ci95"],
        # an adaptive run's `overall` is the mean of its tasks' rates, with a normal interval
        "pc_success_of": pooled.get("pc_success_of", "every seed's episodes pooled, 95% Wilson"),
        # the spread of the seed blocks, shown as what it is, beside what noise alone gives
        "pc_success_mean": mean, "pc_success_std": std, "pc_success_std_from_noise": noise,
    }


def _seed_blocks(recs: Sequence[EpisodeRecord], seeds: Sequence[int], n_episodes: int) -> list[dict[str, Any]]:
    """Each seed's block of `recs` (seed j's: episodes j * n_episodes ..): its rate, counts and
    Wilson interval."""
    out = []
    for j, seed in enumerate(seeds):
        mine = [r for r in recs if r.episode_index // n_episodes == j]
        agg = aggregate(mine)
        out.append({"seed": seed, **{k: agg[k] for k in ("pc_success", "n_episodes", "n_success", "pc_success_ci95")}})
    return out


def _block_noise(per_task: Sequence[dict[str, Any]], n_seeds: int) -> float | None:
    """The std (points) of one seed block's pooled rate from episode noise alone, each task
    at its own rate (every seed's episodes of it pooled)."""
    var, m_total = 0.0, 0.0
    for t in per_task:
        k, n = t["n_success"], t["n_episodes"]
        if n:
            m = n / n_seeds
            var += m * (k / n) * (1 - k / n)
            m_total += m
    return 100.0 * math.sqrt(var) / m_total if m_total else None


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def table(info: dict[str, Any]) -> str:
    """A plain-text summary table: task, episodes, success %, 95% CI, mean length; an adaptive
    run's adds where and why each task stopped, and notes under the table saying what its
    success column and intervals are (`adaptive_notes`)."""
    adaptive = "adaptive" in info
    head = ("task", "episodes", "success %", "95% CI", "mean length", "failed")
    rows: list[tuple[str, ...]] = [(*head, "stop") if adaptive else head]
    kinds: set[str] = set()
    groups = {t["task_group"] for t in info["per_task"]}
    for t in info["per_task"]:
        name = t["task"] if len(groups) == 1 or t["task"] == t["task_group"] else f"{t['task_group']}/{t['task']}"
        point = task_point(t)
        kinds.add(point[1])
        rows.append(_table_row(adaptive, name, t["summary"], point, t.get("stop") or {}))
    if len(info["per_task"]) > 1:
        # a group row only says something new when some group holds several tasks
        if len(groups) > 1 and len(groups) < len(info["per_task"]):
            for g, s in info["per_group"].items():
                rows.append(_table_row(adaptive, f"[{g}]", s, _inside(s["pc_success"], s["pc_success_ci95"], "mean")))
        rows.append(_table_row(adaptive, "overall", info["overall"],
                               _inside(info["overall"]["pc_success"], info["overall"]["pc_success_ci95"], "mean")))
    lines = _aligned(rows)
    if adaptive:
        lines += ["", *adaptive_notes(info, kinds)]
    if "per_seed" in info:
        lines += ["", seed_line(info)]
    return "\n".join(lines)


def _table_row(adaptive: bool, name: str, s: dict[str, Any], point: tuple[float | None, str],
               stop: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The table's cells for the summary `s` shown as `point`; an adaptive run's row adds the
    stop (`stop` None: a group's or the overall row)."""
    ci = s["pc_success_ci95"]
    length = s["avg_episode_length"]
    cells = (
        name,
        str(s["n_episodes"]),
        _fmt_pct(point[0]),
        "-" if ci is None else f"[{ci[0]:.1f}, {ci[1]:.1f}]",
        "-" if length is None else f"{length:.1f}",
        str(s["n_failed"]),
    )
    return (*cells, _stop_cell(stop)) if adaptive else cells


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """The table's lines: its columns aligned, a rule under the head and one above the overall
    row (when there are rows above it)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    lines.insert(1, "-" * len(lines[0]))
    if len(rows) > 2 and rows[-1][0] == "overall":
        lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return lines


def _inside(value: float | None, ci: Sequence[float] | None, kind: str) -> tuple[float | None, str]:
    """`value`, or the midpoint of `ci` when the value lies outside it: no point printed lies
    outside its own interval."""
    if value is None or ci is None or ci[0] - 1e-9 <= value <= ci[1] + 1e-9:
        return value, kind
    return (ci[0] + ci[1]) / 2, "midpoint"


def task_point(entry: dict[str, Any]) -> tuple[float | None, str]:
    """The success rate (percent) the closing table shows for a `per_task` entry, and what it
    is: "unbiased" (a task `--eval.ci_width` stopped: the rule's unbiased rate), "midpoint" (a
    task a comparison, `--eval.versus` or `--eval.perturb_stop=paired`, stopped early: the
    midpoint of its anytime interval, as no rate unbiased under that stop is computed and its
    k/n leans toward the decision) or "k/n" (a fixed run's task, one that ran every episode
    under a comparison, or one still running). Never a point outside its own interval."""
    stop = entry.get("stop") or {}
    s = entry["summary"]
    ci = s["pc_success_ci95"]
    if stop.get("pc_success_unbiased") is not None:
        return _inside(stop["pc_success_unbiased"], ci, "unbiased")
    early = (stop.get("n_episodes") or 0) < stop.get("max_episodes", 0)
    if "wilson_ci95" in stop and ci is not None and early:  # an interval that holds under the stop
        return (ci[0] + ci[1]) / 2, "midpoint"
    return _inside(s["pc_success"], ci, "k/n")


def _stop_cell(stop: dict[str, Any] | None) -> str:
    if stop is None:  # a group's or the overall row
        return ""
    if not stop:
        return "-"
    if stop.get("reason") in (None, "running"):
        return "running"
    return f"{stop['reason']} at {stop['n_episodes']}"


def adaptive_notes(info: dict[str, Any], kinds: set[str]) -> list[str]:
    """What an adaptive run's closing table shows: which point each row is, how the `overall`
    row and the progress line relate to the rows, and why an interval is wider than
    `--eval.ci_width` where one is."""
    said = {
        "unbiased": "a stopped task's rate unbiased under the rule (stop.pc_success_unbiased; its prefix's k/n, "
                    "pc_success, leans toward where the rule stops)",
        "midpoint": "a task the comparison stopped early: the midpoint of its 95% CI (its k/n, pc_success, "
                    "leans toward the decision)",
        "k/n": "k/n of a task that ran every episode, or is still running",
    }
    success = "; ".join(said[k] for k in ("unbiased", "midpoint", "k/n") if k in kinds)
    of = info["overall"].get("pc_success_of")
    if len(info["per_task"]) > 1 and of:
        success += f"; overall: {of}"
        if "midpoint" in kinds and "midpoint" not in of:
            success += " (their k/n, not the midpoints above)"
    notes = [f"success %: {success}; the progress line shows the mean of the tasks' k/n."]
    stops = [t.get("stop") or {} for t in info["per_task"]]
    interval = ""
    if any(s.get("pc_success_unbiased") is not None for s in stops):
        interval = "the rule's exact interval, which holds under its stop"
    elif any("wilson_ci95" in s for s in stops):
        interval = ("the anytime-valid interval of the task's episodes in order, which holds under the "
                    "comparison's stop (the fixed-n one, stop.wilson_ci95, does not), so it is wider")
    w = info["adaptive"].get("ci_width")
    wider = _wider_than_w(info, float(w)) if w is not None else ""
    if interval or wider:
        notes.append("95% CI: " + "; ".join(x for x in (interval, wider) if x) + ".")
    return [textwrap.fill(n, 110, subsequent_indent="  ") for n in notes]


def _wider_than_w(info: dict[str, Any], w: float) -> str:
    """Which stopped tasks' intervals are wider than `--eval.ci_width` and why: the rule met W
    on the prefix's Wilson interval and the exact one, which pays for the stop, is wider; or
    the task reached the maximum before its interval was W wide. "" when none is."""
    met: list[str] = []
    short: list[str] = []
    stopped = 0
    for t in info["per_task"]:
        stop, ci = t.get("stop") or {}, t["summary"]["pc_success_ci95"]
        if stop.get("reason") in (None, "running") or ci is None:
            continue
        stopped += 1
        if ci[1] - ci[0] > 100 * w + 1e-9:
            (met if stop["reason"] == "ci_width" else short).append(f"{t['task']} {ci[1] - ci[0]:.1f}")
    points = f"{100 * w:g} points"
    parts = []
    if met:
        parts.append(f"{len(met)} of {stopped} stopped tasks show one wider than --eval.ci_width's {points} "
                     f"({', '.join(met)}): the rule stopped once the prefix's fixed-n interval (stop.wilson_ci95) "
                     f"was at most {points} wide, and the exact interval also pays for that stop (a look every "
                     f"block, stopping at the first narrow one), so it is wider")
    if short:
        parts.append(f"{', '.join(short)}: reached the maximum of {info['adaptive']['max_episodes']} episodes "
                     f"before its interval was {points} wide")
    return "; ".join(parts)


def seed_line(info: dict[str, Any]) -> str:
    """--seeds: the pooled rate with its interval first, then each seed's rate and their spread
    beside the spread of episode noise alone."""
    parts = [f"{b['seed']}: {_fmt_pct(b['pc_success'])}%" for b in info["per_seed"]]
    across = info["across_seeds"]
    head = ""
    ci = across.get("pc_success_ci95")
    if across.get("pc_success") is not None and ci:
        rate = f"{across['pc_success']:.1f}% [{ci[0]:.1f}, {ci[1]:.1f}]"
        of = across.get("pc_success_of")
        head = (f"all {across['n_seeds']} seeds pooled: {rate} (95% Wilson); " if of is None or "Wilson" in of
                else f"all {across['n_seeds']} seeds: {rate} (95%, {of}); ")
    spread = ""
    if across.get("pc_success_std") is not None:
        spread = f"; spread across seeds: sd {across['pc_success_std']:.1f} points"
        if across.get("pc_success_std_from_noise") is not None:
            spread += f" (episode noise alone: {across['pc_success_std_from_noise']:.1f})"
    return head + "per seed: " + ", ".join(parts) + spread
