"""A rollbench benchmark in one file: walk a corridor to a goal drawn from the seed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rollbench.config import BenchmarkConfig, Feature, register_benchmark
from rollbench.config.env import split_tasks
from rollbench.config.fields import opt
from rollbench.errors import ConfigError

LENGTHS = {"short": 3, "long": 8}  # task -> corridor length


class CorridorEnv(gym.Env):
    """Start at 0; the goal is a cell in 1..length drawn from the reset seed."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"agent_pos": gym.spaces.Box(-100.0, 100.0, (2,), np.float64)}  # (position, goal)
        )
        self._pos = self._goal = 0.0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"agent_pos": np.array([self._pos, self._goal])}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)  # seeds self.np_random: the episode depends on its seed alone
        self._pos, self._goal = 0.0, float(self.np_random.integers(1, self.length + 1))
        return self._obs(), {"is_success": False}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._pos += float(np.clip(action[0], -1.0, 1.0))
        success = abs(self._pos - self._goal) < 0.5
        return self._obs(), float(success), success, False, {"is_success": success}


@register_benchmark("corridor")
@dataclass(frozen=True)
class CorridorConfig(BenchmarkConfig):
    """Walk a corridor to a goal drawn from the seed (tasks: short, long)."""

    task: str = opt("short,long", "short, long, or a comma list")
    speed: float = opt(1.0, "step size of the scripted expert")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in split_tasks(self.task):
            if name not in LENGTHS:
                raise ConfigError(f"--env.task={name!r} is not a corridor task; known: {', '.join(LENGTHS)}")

    def tasks(self) -> dict[str, list[str]]:
        return {name: [name] for name in split_tasks(self.task)}

    def make_task_env(self, task: str) -> gym.Env:
        return CorridorEnv(LENGTHS[task])

    def max_episode_steps(self, task: str) -> int:
        return 2 * LENGTHS[task]

    @property
    def features(self) -> dict[str, Feature]:
        return {"observation.state": Feature("STATE", (2,)), "action": Feature("ACTION", (1,))}

    def expert(self, task: str) -> Callable[[dict[str, Any]], np.ndarray]:
        def act(features: dict[str, Any]) -> np.ndarray:
            pos, goal = features["observation.state"]
            return np.array([np.clip(goal - pos, -self.speed, self.speed)], dtype=np.float32)

        return act
