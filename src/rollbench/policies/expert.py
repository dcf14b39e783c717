"""The benchmark's scripted expert (e.g. MetaWorld's per-task policies)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rollbench.config.fields import build, opt
from rollbench.errors import ConfigError
from rollbench.policies.base import EpisodeStart, Policy, PolicyContext


@dataclass(frozen=True)
class ExpertOptions:
    """`--policy.*` flags of `--policy.type=expert`."""

    action_noise: float = opt(0.0, "standard deviation of Gaussian noise added to every action (a degraded expert)")
    chunk_size: int = opt(1, "a chunking expert: it plans every N steps and holds the action it chose for N steps")

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ConfigError(f"--policy.chunk_size={self.chunk_size} is not allowed; it must be a whole number >= 1 (the "
                              f"steps the expert holds each action it plans)")
        if not 0 <= self.action_noise < math.inf:  # NaN fails too
            raise ConfigError(f"--policy.action_noise={self.action_noise} is not allowed; it must be a number >= 0 (the "
                              f"standard deviation of Gaussian noise added to every action)")


class ExpertPolicy(Policy):
    """Per-row scripted actions; the expert of each slot's task is looked up at reset.

    `--policy.action_noise=S` degrades it: Gaussian noise of standard deviation S (in the
    action space's units) on every action, clipped to the space, drawn from one generator
    per episode seeded by the episode's seed, so a noisy episode still does not depend on
    its slot, batch or worker (a second policy to compare against, e.g. docs/compare.md).
    `--policy.chunk_size=N` makes it a chunking policy, open loop between plans: the action it
    chose on a chunk's first observation is the whole chunk (what action.latency's chunk
    execution is measured with, docs/robustness.md).
    """

    cheap = True
    options_class = ExpertOptions

    def __init__(self, ctx: PolicyContext) -> None:
        self._benchmark = ctx.benchmark
        self._experts: dict[str, Callable[[dict[str, Any]], np.ndarray]] = {}
        self._slot_task: dict[int, str] = {}
        options = build(ExpertOptions, ctx.config.options, "policy.")
        self._noise = options.action_noise
        self._chunk = options.chunk_size
        self._queues: dict[int, list[np.ndarray]] = {}
        self._space = ctx.action_space
        self._rngs: dict[int, np.random.Generator] = {}
        # fail when the policy is built (before any output is written), not at the first
        # reset; cheaply: in worker placement this probe never acts, and importing the
        # simulator here would only slow the start (~1 s for metaworld)
        self._benchmark.check_expert()

    def _expert(self, task: str) -> Callable[[dict[str, Any]], np.ndarray]:
        if task not in self._experts:
            self._experts[task] = self._benchmark.expert(task)
        return self._experts[task]

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        for slot, ep in zip(slots, episodes, strict=True):
            self._expert(ep.task)  # fail at reset, not mid-episode, if there is none
            self._slot_task[slot] = ep.task
            self._queues[slot] = []
            if self._noise:
                self._rngs[slot] = np.random.default_rng([ep.seed, 0x4E4F495345])  # apart from the env's own seed

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        keys = [k for k in batch if k != "task"]
        rows = []
        for i, slot in enumerate(slots):
            queue = self._queues[slot]
            if not queue:
                queue.extend([self._expert(self._slot_task[slot])({k: batch[k][i] for k in keys})] * self._chunk)
            action = queue.pop()
            if self._noise:
                noisy = action + self._rngs[slot].normal(0.0, self._noise, np.shape(action))
                action = np.clip(noisy, self._space.low, self._space.high).astype(np.asarray(action).dtype)
            rows.append(action)
        return np.stack(rows)
