"""A run's close: its durable logs, read and merged once, become the whole `EvalInfo`.

    every log under the run directory ──merge──▶ Merged (the plan, one record per unit)
        ──stop rule (if any): apply──▶ the records that count (each task's prefix)
        ──▶ the body: LeRobot's keys (results/eval_info.summary_body)
                      + the stop rule's estimates and `adaptive`   (stopping/section.py)
                      + a sweep's `per_condition`                   (results/sweep.py)
                      + a recording's `dataset`, joined             (results/dataset.py)
        ──▶ EvalInfo(body, config, versions, how) ──atomic write──▶ eval_info.json

Nothing edits the EvalInfo once it is made. The lifecycle calls `close_run` once per run
(a shard child does not close: its launcher does, with every shard's log); `rollbench
merge` calls `merge_dir`, a close with nothing executed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rollbench import writable
from rollbench.config.run import RunConfig
from rollbench.episode.context import PolicyCalls
from rollbench.plan import EpisodeUnit, plan_for
from rollbench.results import dataset, eval_info, video
from rollbench.results.eval_info import EvalInfo, ExecutionFacts
from rollbench.results.log import EPISODES_DIR
from rollbench.results.merge import Merged, read_merged
from rollbench.results.summary import seed_results
from rollbench.results.sweep import per_condition
from rollbench.stopping import adaptive, section
from rollbench.stopping.rules import stop_rule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Closing:
    """What the close needs of the run it closes beyond its config and plan: who ran it and
    how, and what its open already knows (its stop rule, whether it resumed)."""

    how: ExecutionFacts
    command: list[str] | None = None  # the argv that reruns the run
    started: float | None = None  # time.time() at the open of this command's run
    rule: adaptive.Rule | None = None  # the run's stop rule, built at its open (a merge builds its own)
    continuing: bool = False  # an earlier command ran this run too (its policy calls count)
    recursive: bool = False  # every log under the directory (a merge of shard directories)
    join_dataset: bool = True  # a recording's parts are joined (not by a shard: its launcher joins)


def close_run(output_dir: Path, cfg: RunConfig, plan: list[EpisodeUnit], closing: Closing) -> tuple[Merged, EvalInfo]:
    """Merge every log under `output_dir` once into one EvalInfo and write it atomically; the
    merged records that count (an adaptive run: each task's prefix, plan included)."""
    merged = read_merged(output_dir, plan, recursive=closing.recursive)
    _warn(output_dir, merged, closing.recursive)
    rule = closing.rule
    if rule is not None:
        rule.refresh()  # the other run of a comparison: all it logged until now
    applied = None if rule is None else adaptive.apply(rule, merged)
    counted = merged if applied is None else applied.merged
    body = eval_info.summary_body(counted, cfg, output_dir)
    if rule is not None and applied is not None:
        section.add_stops(rule, applied, merged, body, cfg.eval.is_sweep)
    if len(cfg.seeds) > 1:  # of what counts: an adaptive run's prefixes; a sweep's control
        seed_results(body, eval_info.control_only(counted) if cfg.eval.is_sweep else counted, cfg.seeds, cfg.eval.n_episodes)
    if cfg.eval.is_sweep:  # each condition against the control
        stop_of = None if rule is None or applied is None else section.condition_stops(rule, applied)
        body["per_condition"] = per_condition(counted, cfg.eval.conditions, cfg.eval.n_episodes * max(1, len(cfg.seeds)),
                                              stop_of)
    if cfg.eval.record_mode is not None and closing.join_dataset:
        finished = body["status"] == "complete" and body.get("adaptive", {}).get("tasks_running", 0) == 0
        body["dataset"] = dataset.join(cfg, output_dir, counted, finished)
    how = closing.how
    if closing.continuing:  # the commands that ran this run before called the policy too
        earlier = (eval_info.read(output_dir) or {}).get("policy_calls")
        how = replace(how, policy_calls=PolicyCalls.total(earlier, how.policy_calls))
    took = time.time() - closing.started if closing.started is not None else None
    info = EvalInfo(body, cfg.to_dict(), eval_info.versions(cfg), how, closing.command, took)
    eval_info.write(output_dir, info)
    return counted, info


def _warn(output_dir: Path, merged: Merged, recursive: bool) -> None:
    """Say what the logs hold that a user should know: conflicting results, missing videos."""
    if merged.conflicts:
        log.warning("%d units have conflicting results in the logs; see eval_info.json 'conflicts'", len(merged.conflicts))
    gone = video.missing(output_dir, merged.records.values(), recursive)
    if gone:
        log.warning("%d videos named in the episode logs are not on disk (e.g. %s); eval_info.json lists only those "
                    "that are", len(gone), gone[0])


def push_dataset(cfg: RunConfig, info: EvalInfo) -> list[str]:
    """--eval.recording_repo_id: the joined dataset, pushed to the hub (lerobot-eval's meaning)."""
    d = info.body.get("dataset")
    if not d or not cfg.eval.recording_repo_id or not d["episodes"]:
        return []
    problem = dataset.push(Path(cfg.output_dir), Path(d["root"]), d["repo_id"], cfg.eval.recording_private)
    if problem is None:
        log.info("pushed the dataset to the hub as %s", d["repo_id"])
    return [problem] if problem else []


def merge_dir(root: Path, cfg: RunConfig, command: list[str] | None = None) -> EvalInfo:
    """`rollbench merge`: close a run (every log under `root`) that nothing executes now.
    `command`: the one that runs the merged run (its shards' flags, as one process)."""
    plan = plan_for(cfg)  # no availability check: a merge needs the logs, not the simulator
    if cfg.eval.record_mode is not None and cfg.eval.recording_root:  # the joined dataset goes there
        writable.output_dir("--eval.recording_root", cfg.eval.recording_root)
    n_dirs = len({*map(str, root.glob(f"**/{EPISODES_DIR}"))})
    how = ExecutionFacts("merge", detail={"merged_from": n_dirs})
    _, info = close_run(root, cfg, plan, Closing(how, command, rule=stop_rule(cfg), recursive=True))
    for problem in push_dataset(cfg, info):
        log.warning("%s", problem)
    return info
