"""Run one evaluation (or one shard of it) in this process, into a durable log.

    config -> plan -> (shard, minus what the log already holds) -> scheduler -> log -> summary

Every finished episode is appended to this process's log file before it counts; the
summary and `eval_info.json` are rebuilt from all the logs in the output directory.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollbench.config.run import RunConfig
from rollbench.errors import ConfigError, RollbenchError, RunInterrupted
from rollbench.plan import EpisodeUnit, make_plan, pending, shard
from rollbench.policies.base import Policy
from rollbench.progress import Progress
from rollbench.rendering import apply_backend, choose_backend
from rollbench.results.log import EpisodeLog, read_records, writer_name
from rollbench.results.merge import Merged, merge
from rollbench.results.records import EpisodeRecord
from rollbench.results.store import EVAL_INFO, prepare, write_json_atomic
from rollbench.results.summary import eval_info
from rollbench.results.video import check_encoder
from rollbench.rollout import VideoPlan
from rollbench.scheduler.common import StepContext, cpu_count

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    output_dir: Path
    info: dict[str, Any]
    ran: int  # episodes this process ran
    mode: str
    failed: int  # units of this shard logged as failed (other shards' failures are theirs)


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
    info = eval_info(merged, descriptions, output_dir)
    info.update(extra)
    write_json_atomic(output_dir / EVAL_INFO, info)
    return info


@dataclass(frozen=True)
class Plan:
    """How this process will run its units (decided once, written into eval_info.json)."""

    mode: str  # continuous | lockstep
    placement: str  # worker | driver (continuous mode)
    workers: int
    slots_per_worker: int


def default_slots(step_cost_ms: float, placement: str, workers: int) -> int:
    """Slots per worker.

    Worker placement: 1 — there is no round trip per step, and one slot per worker keeps
    the tail of the run short. Driver placement: enough that a round trip (~0.3 ms for 8
    state envs here) is amortised over the steps of one message, and at least 8 rows per
    policy call over all workers, so a network in the driver sees batches, not single rows
    (measured: a LeRobot ACT on PushT pixels ran 2.1x faster at 4 slots than at 1).
    """
    if placement == "worker":
        return 1
    amortise = math.ceil(1.5 / max(step_cost_ms, 1e-3))
    batch = math.ceil(8 / max(1, workers))
    return max(1, min(16, max(amortise, batch)))


def video_plan(cfg: RunConfig) -> VideoPlan | None:
    if cfg.eval.max_episodes_rendered == 0:
        return None
    return VideoPlan(cfg.output_dir, cfg.eval.max_episodes_rendered, cfg.env.fps)


def decide(cfg: RunConfig, policy: Policy) -> Plan:
    mode = cfg.eval.mode
    if mode == "auto":
        mode = "continuous" if getattr(policy, "per_slot_state", True) else "lockstep"
    elif mode == "continuous" and not getattr(policy, "per_slot_state", True):
        raise ConfigError(
            f"--eval.mode=continuous: policy {cfg.policy.type!r} keeps no per-slot state; use --eval.mode=lockstep or auto"
        )
    placement = cfg.policy.placement
    if placement == "auto":
        placement = "worker" if getattr(policy, "cheap", False) and cfg.policy.device == "cpu" else "driver"
    workers = cfg.workers if isinstance(cfg.workers, int) else cpu_count()
    slots = cfg.slots_per_worker or default_slots(cfg.env.step_cost_ms, placement, workers)
    return Plan(mode, placement, workers, slots)


def schedule(cfg: RunConfig, ctx: StepContext, units: list[EpisodeUnit], how: Plan) -> Iterator[EpisodeRecord]:
    if how.mode == "lockstep":
        from rollbench.scheduler.lockstep import run_lockstep

        return run_lockstep(
            ctx, units, cfg.eval.lockstep_batch_size, cfg.eval.use_async_envs, cfg.eval.max_parallel_tasks,
            video_plan(cfg),
        )
    from rollbench.scheduler.continuous import PoolOptions, run_continuous

    opts = PoolOptions(
        workers=how.workers, slots_per_worker=how.slots_per_worker, placement=how.placement,
        max_retries=cfg.eval.max_retries, step_timeout_s=cfg.eval.step_timeout_s,
        log_dir=Path(cfg.output_dir) / "logs", gl_backend=os.environ.get("MUJOCO_GL", "egl"),
        video=video_plan(cfg), max_batch=cfg.eval.batch_size,
    )
    return run_continuous(ctx, units, opts)


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
    from rollbench.tune.probe import rss_now

    rss_before, t0 = rss_now(), time.perf_counter()
    probe = ctx.make_policy()  # a bad policy fails here, before any output is written
    load_s = time.perf_counter() - t0
    if cfg.eval.max_episodes_rendered:
        check_encoder()
    backend = choose_backend(cfg.render_device)
    apply_backend(backend)  # before anything here imports MuJoCo; workers get it in their spec
    continuing = prepare(output_dir, cfg.identity(), cfg.to_dict(), cfg.resume)
    tuned: dict[str, Any] | None = None
    if cfg.workers == "auto":  # after prepare: a refused output_dir is said before a 30 s probe
        from rollbench import tune

        cfg, _, tuned_rec = tune.for_eval(cfg, probe, load_s, rss_before)
        tuned = {
            "flags": tune.recommended_flags(tuned_rec), "bottleneck": tuned_rec.bottleneck,
            "predicted_steps_per_s": tuned_rec.predicted_steps_per_s, "predicted_wall_s": tuned_rec.predicted_wall_s,
            "predicted_total_steps": tuned_rec.predicted_total_steps,
        }
        backend = choose_backend(cfg.render_device)
        apply_backend(backend)
    how = decide(cfg, probe)
    if how.mode == "continuous" and how.placement == "worker":
        probe.close()  # every worker builds its own
    else:
        ctx.keep(probe)  # the scheduler's first make_policy() returns it: a checkpoint loads once
    before = merge(read_records(output_dir), plan)
    mine = shard(plan, cfg.eval.shard_id, cfg.eval.num_shards)
    todo = pending(mine, before.done_keys())
    if continuing:
        log.info("resuming in %s: %d of this shard's %d episodes already done", output_dir, len(mine) - len(todo), len(mine))
    progress = Progress(total=len(mine), already=len(mine) - len(todo), stream=progress_stream)
    ran = 0
    started = time.time()
    writer = writer_name(cfg.eval.shard_id, cfg.eval.num_shards)
    try:
        with EpisodeLog(output_dir, writer) as episode_log:
            for rec in schedule(cfg, ctx, todo, how):
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
        {"mode": how.mode, "scheduling": {**dataclasses.asdict(how), "gl_backend": backend}, "config": cfg.to_dict(), "versions": versions(cfg), "this_run_s": time.time() - started,
         **({"tune": tuned} if tuned else {})},
    )
    if not cfg.eval.num_shards > 1 and merged.missing:
        raise RollbenchError(f"internal: {len(merged.missing)} planned units are missing after the run")
    failed = sum(1 for u in mine if u.key in merged.records and not merged.records[u.key].ok)
    return RunResult(output_dir, info, ran, how.mode, failed)
