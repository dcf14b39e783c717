"""A rollbench policy in one file: steer the fake benchmark's point to its target."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rollbench.config.fields import build, opt
from rollbench.errors import ConfigError
from rollbench.policies import POLICIES, EpisodeStart, Policy, PolicyContext

STEP = 0.1  # how far the fake benchmark's point moves per unit of action


@dataclass(frozen=True)
class SteerOptions:
    """Plan a straight line to the target, a chunk of actions at a time."""

    chunk: int = opt(4, "actions planned per call; a slot plays its chunk before the policy plans again")

    def __post_init__(self) -> None:
        if self.chunk < 1:
            raise ConfigError(f"--policy.chunk={self.chunk} is not allowed; it must be >= 1")


@POLICIES.register("steer")
class SteerPolicy(Policy):
    """Steers to the target of --env.type=fake, in chunks of --policy.chunk actions."""

    per_slot_state = True  # each slot's queue of planned actions is its own
    cheap = True  # a few numpy operations: run it inside every env worker
    options_class = SteerOptions  # its --policy.* flags

    def __init__(self, ctx: PolicyContext) -> None:
        self.opts = build(SteerOptions, ctx.config.options, "policy.")
        if "observation.environment_state" not in ctx.benchmark.features:
            raise ConfigError(f"--policy.type=steer reads observation.environment_state (position, target), "
                              f"which --env.type={ctx.benchmark.type_name} does not give")
        self.steps_per_inference = self.opts.chunk
        self._queues: dict[int, deque[np.ndarray]] = {}

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        for slot in slots:
            self._queues[slot] = deque()  # a new episode in this slot: drop the old one's plan

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        state = np.asarray(batch["observation.environment_state"])  # (rows, 4): x, y, target x, target y
        actions = []
        for row, slot in enumerate(slots):
            queue = self._queues[slot]
            if not queue:  # plan `chunk` equal steps that end on the target (clipped to the space)
                step = np.clip((state[row, 2:] - state[row, :2]) / (STEP * self.opts.chunk), -1.0, 1.0)
                queue.extend([step.astype(np.float32)] * self.opts.chunk)
            actions.append(queue.popleft())
        return np.stack(actions)
