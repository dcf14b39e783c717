"""Run one evaluation (or one shard of it) in this process, into a durable log.

    config -> plan -> (shard, minus what the log already holds) -> scheduler -> log -> summary

Every finished episode is appended to this process's log file before it counts; the
summary and `eval_info.json` are rebuilt from all the logs in the output directory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollbench.config.run import RunConfig
from rollbench.errors import RollbenchError, RunInterrupted
from rollbench.plan import EpisodeUnit, make_plan, pending, shard
from rollbench.progress import Progress
from rollbench.results.log import EpisodeLog, read_records, writer_name
from rollbench.results.merge import Merged, merge
from rollbench.results.records import EpisodeRecord
from rollbench.results.store import EVAL_INFO, prepare, write_json_atomic
from rollbench.results.summary import eval_info
from rollbench.scheduler.common import StepContext

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    output_dir: Path
    info: dict[str, Any]
    ran: int  # episodes this process ran
    mode: str


def versions(cfg: RunConfig) -> dict[str, Any]:
    import platform

    import gymnasium
    import numpy

    from rollbench import __version__

    return {
        "rollbench": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "gymnasium": gymnasium.__version__,
        **cfg.env.package_versions(),
    }


def build_plan(cfg: RunConfig) -> list[EpisodeUnit]:
    return make_plan(cfg.env.tasks(), cfg.eval.n_episodes, cfg.seed)


def write_eval_info(output_dir: Path, merged: Merged, cfg: RunConfig | None, extra: dict[str, Any]) -> dict[str, Any]:
    descriptions = {}
    if cfg is not None:
        descriptions = {u.task: cfg.env.task_description(u.task) for u in merged.plan}
    info = eval_info(merged, descriptions)
    info.update(extra)
    write_json_atomic(output_dir / EVAL_INFO, info)
    return info


def choose_mode(cfg: RunConfig, ctx: StepContext) -> str:
    if cfg.eval.mode != "auto":
        return cfg.eval.mode
    return "lockstep"


def schedule(cfg: RunConfig, ctx: StepContext, units: Sequence[EpisodeUnit], mode: str) -> Iterator[EpisodeRecord]:
    if mode == "lockstep":
        from rollbench.scheduler.lockstep import run_lockstep

        return run_lockstep(ctx, units, cfg.eval.lockstep_batch_size, cfg.eval.use_async_envs)
    raise NotImplementedError(f"--eval.mode={mode} is not built yet; use --eval.mode=lockstep")


def run_eval(cfg: RunConfig, progress_stream: Any = None) -> RunResult:
    output_dir = Path(cfg.output_dir)
    cfg.env.check_available()
    if cfg.eval.batch_size is not None and cfg.eval.batch_size > cfg.eval.n_episodes:
        log.warning(
            "--eval.batch_size=%d is larger than --eval.n_episodes=%d; using %d",
            cfg.eval.batch_size, cfg.eval.n_episodes, cfg.eval.n_episodes,
        )
    validate = getattr(cfg.env, "validate_tasks", None)
    if validate is not None:
        validate()
    plan = build_plan(cfg)
    ctx = StepContext(cfg.env, cfg.policy)
    ctx.make_policy().close()  # a bad policy fails here, before any output is written
    continuing = prepare(output_dir, cfg.identity(), cfg.to_dict(), cfg.resume)
    before = merge(read_records(output_dir), plan)
    mine = shard(plan, cfg.eval.shard_id, cfg.eval.num_shards)
    todo = pending(mine, before.done_keys())
    if continuing:
        log.info("resuming in %s: %d of this shard's %d episodes already done", output_dir, len(mine) - len(todo), len(mine))
    mode = choose_mode(cfg, ctx)
    progress = Progress(total=len(mine), already=len(mine) - len(todo), stream=progress_stream)
    ran = 0
    started = time.time()
    writer = writer_name(cfg.eval.shard_id, cfg.eval.num_shards)
    try:
        with EpisodeLog(output_dir, writer) as episode_log:
            for rec in schedule(cfg, ctx, todo, mode):
                episode_log.append(rec)
                ran += 1
                progress.update(rec)
    except KeyboardInterrupt:
        progress.close()
        raise RunInterrupted(
            f"interrupted: {ran} episodes finished in this run are saved in {output_dir}; "
            f"run the same command again to resume"
        ) from None
    progress.close()
    merged = merge(read_records(output_dir), plan)
    if merged.conflicts:
        log.warning("%d units have conflicting results in the logs; see eval_info.json 'conflicts'", len(merged.conflicts))
    info = write_eval_info(
        output_dir, merged, cfg,
        {"mode": mode, "config": cfg.to_dict(), "versions": versions(cfg), "this_run_s": time.time() - started},
    )
    if not cfg.eval.num_shards > 1 and merged.missing:
        raise RollbenchError(f"internal: {len(merged.missing)} planned units are missing after the run")
    return RunResult(output_dir, info, ran, mode)
