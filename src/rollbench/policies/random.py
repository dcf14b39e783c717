"""Uniform random actions, seeded per episode from the unit's seed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rollbench.policies.base import EpisodeStart, Policy, PolicyContext


class RandomPolicy(Policy):
    """Samples the action space with one RNG per slot, seeded by the episode's seed.

    The RNG of episode *i* does not depend on which slot or batch it runs in, so the
    actions of an episode are the same under any batch size, worker count or shard.
    """

    cheap = True

    def __init__(self, ctx: PolicyContext) -> None:
        self._space = ctx.action_space
        self._rngs: dict[int, np.random.Generator] = {}

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        for slot, ep in zip(slots, episodes, strict=True):
            self._rngs[slot] = np.random.default_rng(ep.seed)

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        space = self._space
        if isinstance(space, gym.spaces.Discrete):
            return np.array([space.start + self._rngs[s].integers(space.n) for s in slots], dtype=np.int64)
        low, high = space.low, space.high
        return np.stack([self._rngs[s].uniform(low, high).astype(space.dtype) for s in slots])
