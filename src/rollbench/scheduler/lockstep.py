"""Lockstep mode: lerobot-eval's way, task by task, a batch of envs reset together.

A batch of `eval.batch_size` envs of one task is reset with its units' seeds and stepped
until every episode in it has ended; finished envs keep stepping (their results are
masked), exactly as `lerobot-eval` does. This is the path for policies that cannot keep
per-slot state, and the reference the continuous scheduler is checked against.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from rollbench.plan import EpisodeUnit
from rollbench.policies.base import Policy
from rollbench.results.records import EpisodeRecord
from rollbench.rollout import EpisodeTracker, split_vector_info
from rollbench.scheduler.common import StepContext


def _by_task(units: Sequence[EpisodeUnit]) -> Iterator[list[EpisodeUnit]]:
    for _, group in itertools.groupby(units, key=lambda u: (u.suite, u.task_id)):
        yield list(group)


def run_lockstep(
    ctx: StepContext, units: Sequence[EpisodeUnit], batch_size: int, use_async_envs: bool
) -> Iterator[EpisodeRecord]:
    """Run `units` (in plan order); yield each record as its episode ends."""
    policy = ctx.make_policy()
    try:
        for task_units in _by_task(units):
            n_envs = min(batch_size, len(task_units))
            vec = ctx.benchmark.make_vector_env(task_units[0].task, n_envs, use_async_envs)
            try:
                for start in range(0, len(task_units), n_envs):
                    yield from _run_batch(ctx, policy, vec, task_units[start : start + n_envs], n_envs)
            finally:
                vec.close()
    finally:
        policy.close()


def _run_batch(
    ctx: StepContext, policy: Policy, vec: Any, chunk: list[EpisodeUnit], n_envs: int
) -> Iterator[EpisodeRecord]:
    # a short last batch pads with copies of its first unit; their results are dropped
    padded = chunk + [chunk[0]] * (n_envs - len(chunk))
    slots = list(range(n_envs))
    obs, _ = vec.reset(seed=[u.seed for u in padded])
    policy.reset(slots, [ctx.episode_start(u) for u in padded])
    descriptions = [ctx.benchmark.task_description(u.task) for u in padded]
    rule = ctx.benchmark.success
    trackers = [EpisodeTracker(u, ctx.benchmark.effective_max_steps(u.task), rule) for u in chunk]
    active = np.array([i < len(chunk) for i in range(n_envs)])
    while active.any():
        actions = ctx.act(policy, obs, slots, descriptions)
        obs, rewards, terminated, truncated, info = vec.step(actions)
        infos = split_vector_info(info, n_envs)
        for i in np.flatnonzero(active):
            if trackers[i].update(rewards[i], terminated[i], truncated[i], infos[i]):
                active[i] = False
                yield trackers[i].record(worker="main")
