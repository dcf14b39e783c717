"""Lockstep mode: lerobot-eval's way, task by task, a batch of envs reset together.

A batch of `--eval.batch_size` envs of one task is reset with its units' seeds and stepped
until every episode in it has ended; finished envs keep stepping (their results are
masked), exactly as `lerobot-eval` does. This is the path for policies that cannot keep
per-slot state, and the reference the continuous scheduler is checked against.
"""

from __future__ import annotations

import copy
import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rollbench.benchmarks.frames import RENDER_VIDEO
from rollbench.config.env import set_episode_index
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import Policy
from rollbench.results.records import EpisodeRecord
from rollbench.results.video import VideoRecorder
from rollbench.rollout import EpisodeTracker, VideoPlan, grab_frame, split_vector_info
from rollbench.scheduler.common import StepContext


@dataclass(frozen=True)
class LockstepOptions:
    """How lockstep mode runs its batches (decided once, in `scheduler.decide`)."""

    envs_per_batch: int  # --eval.batch_size: envs of one task reset and stepped together
    use_async_envs: bool = False  # the batch's envs step in subprocesses (gymnasium's AsyncVectorEnv)
    max_parallel_tasks: int = 1  # tasks run at once, in threads
    video: VideoPlan | None = None


def _by_task(units: Sequence[EpisodeUnit]) -> Iterator[list[EpisodeUnit]]:
    for _, group in itertools.groupby(units, key=lambda u: (u.task_group, u.task_id)):
        yield list(group)


def run_lockstep(
    ctx: StepContext, policy: Policy, units: Sequence[EpisodeUnit], opts: LockstepOptions,
) -> Iterator[EpisodeRecord]:
    """Run `units` (in plan order) with `policy`; yield each record as its episode ends.

    The caller owns `policy` (it built it, it closes it). With `max_parallel_tasks` > 1,
    that many tasks run at once in threads, each with its own vector env and its own shallow
    copy of the policy: the weights are shared, the per-episode state is not (a shallow copy
    whose `reset` rebinds its state, as LeRobot's policies do; our adapters key their state
    by slot, and each task gets its own slots). Threads overlap well with async envs, whose
    steps wait on pipes.
    """
    run = _Lockstep(ctx, opts, _Recording(opts.video, VideoRecorder()) if opts.video is not None else None)
    tasks = list(_by_task(units))
    try:
        if opts.max_parallel_tasks <= 1 or len(tasks) <= 1:
            for task_units in tasks:
                yield from run.task(policy, task_units, 0, None)
        else:
            yield from run.parallel(policy, tasks)
    finally:
        if run.rec is not None:
            run.rec.recorder.close()


@dataclass
class _Recording:
    plan: VideoPlan
    recorder: VideoRecorder

    def grabber(self, vec: Any, label: str) -> Callable[[list[int]], list[Any]]:
        """rows -> the video frames of those envs of `vec` (an async env renders all of its envs)."""
        envs = getattr(vec, "envs", None)
        if envs is not None:
            return lambda rows: [grab_frame(envs[i], label, self.plan.size) for i in rows]
        try:
            # a sub-process dies on a call its env cannot answer: ask first, once per batch
            video = all(vec.call("has_wrapper_attr", RENDER_VIDEO))
        except Exception:
            return lambda rows: [None] * len(rows)

        def frames(rows: list[int]) -> list[Any]:
            if not rows:
                return []
            try:
                all_frames = vec.call(RENDER_VIDEO, self.plan.size) if video else vec.call("render")
            except Exception:
                return [None] * len(rows)
            return [all_frames[i] for i in rows]

        return frames


@dataclass
class _Lockstep:
    ctx: StepContext
    opts: LockstepOptions
    rec: _Recording | None

    def task(
        self, policy: Policy, task_units: list[EpisodeUnit], slot_base: int, stop: threading.Event | None,
    ) -> Iterator[EpisodeRecord]:
        """One task's units, batch after batch, in one vector env."""
        n_envs = min(self.opts.envs_per_batch, len(task_units))
        vec = self.ctx.benchmark.make_vector_env(task_units[0].task, n_envs, self.opts.use_async_envs)
        try:
            for start in range(0, len(task_units), n_envs):
                if stop is not None and stop.is_set():
                    return
                yield from self.batch(policy, vec, task_units[start : start + n_envs], n_envs, slot_base)
        finally:
            vec.close()

    def parallel(self, policy: Policy, tasks: list[list[EpisodeUnit]]) -> Iterator[EpisodeRecord]:
        out: queue.Queue[tuple[str, Any]] = queue.Queue()
        stop = threading.Event()
        todo = list(enumerate(tasks))
        lock = threading.Lock()

        def runner() -> None:
            while not stop.is_set():
                with lock:
                    if not todo:
                        return
                    index, task_units = todo.pop(0)
                mine = copy.copy(policy)
                try:
                    for record in self.task(mine, task_units, index * self.opts.envs_per_batch, stop):
                        out.put(("record", record))
                except BaseException as err:  # handed to the consumer, which re-raises it
                    out.put(("error", err))
                    stop.set()
                    return

        threads = [threading.Thread(target=runner, daemon=True) for _ in range(min(self.opts.max_parallel_tasks, len(tasks)))]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads) or not out.empty():
                try:
                    kind, item = out.get(timeout=0.2)
                except queue.Empty:
                    continue
                if kind == "error":
                    raise item
                yield item
        finally:
            stop.set()
            for t in threads:
                t.join()

    def batch(
        self, policy: Policy, vec: Any, chunk: list[EpisodeUnit], n_envs: int, slot_base: int,
    ) -> Iterator[EpisodeRecord]:
        """One batch: reset every env with its unit's seed, step until all its episodes ended."""
        ctx, rec = self.ctx, self.rec
        # a short last batch pads with copies of its first unit; their results are dropped
        padded = chunk + [chunk[0]] * (n_envs - len(chunk))
        slots = list(range(slot_base, slot_base + n_envs))
        set_episode_index(ctx.benchmark, vec, [u.episode_index for u in padded])
        obs, _ = vec.reset(seed=[u.seed for u in padded])
        policy.reset(slots, [ctx.episode_start(u) for u in padded])
        descriptions = [ctx.benchmark.task_description(u.task) for u in padded]
        rule = ctx.benchmark.success
        trackers = [EpisodeTracker(u, ctx.benchmark.effective_max_steps(u.task), rule) for u in chunk]
        active = np.array([i < len(chunk) for i in range(n_envs)])
        filmed = [i for i, u in enumerate(chunk) if rec is not None and rec.plan.wants(u)]
        grab = rec.grabber(vec, chunk[0].task) if rec is not None and filmed else None
        if rec is not None and grab is not None:
            for i in filmed:
                rec.recorder.start((chunk[i].key, slot_base), rec.plan.output_dir_path(chunk[i]), rec.plan.rate)
            for i, frame in zip(filmed, grab(filmed), strict=True):
                rec.recorder.add((chunk[i].key, slot_base), frame)
        while active.any():
            actions = ctx.act(policy, obs, slots, descriptions)
            obs, rewards, terminated, truncated, info = vec.step(actions)
            infos = split_vector_info(info, n_envs)
            ended = [
                int(i) for i in np.flatnonzero(active)
                if trackers[i].update(rewards[i], terminated[i], truncated[i], infos[i])
            ]
            if rec is not None and grab is not None:
                rows = [i for i in filmed if active[i] and rec.plan.films(trackers[i].n_steps, i in ended)]
                for i, frame in zip(rows, grab(rows), strict=True):
                    rec.recorder.add((chunk[i].key, slot_base), frame)
            for i in ended:
                active[i] = False
                path = None
                if rec is not None and i in filmed:
                    rec.recorder.finish((chunk[i].key, slot_base))
                    path = rec.plan.relpath(chunk[i])
                yield trackers[i].record(worker="main", video_path=path)
