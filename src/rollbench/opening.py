"""A run's open: claim the output directory, prepare or resume it, and find the units still
to do.

    prepare (results/store.py: the manifest, a resume's checks) and claim (results/owners.py:
    one run owns the directory, its shards share it)
        ──▶ every log of the directory, merged once ──▶ the finished units
        ──▶ the stop rule (stopping/rules.py), fed the finished records ──▶ which units are
            still wanted, in the order each task's prefix grows
        ──▶ a recording: finished units without their frames run again (results/dataset.py)
        ──▶ Run: the plan, this command's share, what is done, what is left to do
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from rollbench.config.run import RunConfig
from rollbench.executors.base import Run, Writes
from rollbench.plan import EpisodeUnit, UnitKey, pending
from rollbench.results import owners
from rollbench.results.dataset import done_with_frames
from rollbench.results.merge import Merged, read_merged
from rollbench.results.store import prepare, sweep_partial_videos
from rollbench.stopping.adaptive import Stops
from rollbench.stopping.rules import stop_rule

log = logging.getLogger(__name__)


def open_run(cfg: RunConfig, plan: list[EpisodeUnit], units: list[EpisodeUnit], writes: Writes) -> Run:
    """Prepare (or resume in) the output directory; the units of `units` still to do. The
    run holds the directory's claim until `Run.claim.release()`; `writes` is what of the run
    this process writes, as its executor says (`Executor.writes`)."""
    output_dir = Path(cfg.output_dir)
    continuing, claim = prepare(output_dir, cfg.to_dict(), _writer(cfg, writes))
    try:
        merged = read_merged(output_dir, plan)
        rule = stop_rule(cfg)
        # failed units run again, so only finished ones decide; every shard's log is read
        stops = None if rule is None else Stops(rule, (r for r in merged.records.values() if r.ok))
        done, todo = _left(cfg, output_dir, merged, units, stops)
    except BaseException:
        claim.release()
        raise
    if continuing:
        log.info("resuming in %s: %d of %d episodes already done", output_dir, sum(u.key in done for u in units), len(units))
        sweep_partial_videos(output_dir)  # left by killed workers; their episodes run again
    return Run(cfg, output_dir, plan, units, done, todo, continuing, time.time(), stops, claim)


def _writer(cfg: RunConfig, writes: Writes) -> owners.Writer:
    """This process as the directory's writer: which run, which shard, whose child."""
    return owners.Writer(
        host=owners.host(), pid=os.getpid(), identity=cfg.identity(), shard_id=writes.shard_id,
        num_shards=cfg.eval.num_shards, launched_by=writes.launched_by, resume=cfg.resume, started=time.time())


def _left(cfg: RunConfig, output_dir: Path, merged: Merged, units: list[EpisodeUnit],
          stops: Stops | None) -> tuple[frozenset[UnitKey], list[EpisodeUnit]]:
    """(the units done, those of `units` still to do, in the order they should run)."""

    def still_to_do(done: frozenset[UnitKey]) -> list[EpisodeUnit]:
        todo = pending(units, done)
        if stops is None:
            return todo
        # each task's units in the order its prefixes grow (--seeds: round robin over the seeds'
        # blocks), a sweep's conditions side by side, so a condition's pairs with the control
        # come as they go
        tasks = {key: i for i, key in enumerate(dict.fromkeys((u.task_group, u.task_id) for u in todo))}
        conditions = {c: i for i, c in enumerate(cfg.eval.conditions)}
        todo.sort(key=lambda u: (tasks[(u.task_group, u.task_id)], stops.rule.position(u.episode_index),
                                 conditions[u.condition]))
        return [u for u in todo if stops.wanted(u)]

    done = done_with_frames(cfg, output_dir, merged, still_to_do)
    return done, still_to_do(done)
