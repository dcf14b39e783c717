"""A tiny deterministic benchmark, registered like a real one, for tests and demos.

`CountdownEnv`: a point moves in the plane toward a target drawn from the reset seed;
the episode succeeds (and terminates) when the point is within reach, and is cut at a
per-task step limit. Episode lengths differ from seed to seed, which is what makes
batching and scheduling bugs visible in exact per-episode comparisons.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rollbench.config.env import BenchmarkConfig, Feature, register_benchmark, split_tasks
from rollbench.config.fields import opt
from rollbench.errors import ConfigError

TASKS = {"near": 0.3, "mid": 0.8, "far": 2.5}  # task -> target distance scale
GROUPS = {"all": list(TASKS)}
SPEED = 0.1
REACH = 0.05


class CountdownEnv(gym.Env):
    """Reach a target drawn from the reset seed; success within `REACH`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, scale: float, max_steps: int, step_sleep_s: float = 0.0) -> None:
        self.render_mode = "rgb_array"
        self.scale = scale
        self.max_steps = max_steps
        self.step_sleep_s = step_sleep_s
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {
                "agent_pos": gym.spaces.Box(-10.0, 10.0, (2,), np.float64),
                "environment_state": gym.spaces.Box(-10.0, 10.0, (4,), np.float64),
            }
        )
        self._pos: np.ndarray = np.zeros(2)
        self._target: np.ndarray = np.zeros(2)
        self._t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"agent_pos": self._pos.copy(), "environment_state": np.concatenate([self._pos, self._target])}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._target = self.np_random.uniform(-self.scale, self.scale, size=2)
        self._pos = np.zeros(2)
        self._t = 0
        return self._obs(), {"is_success": False}

    def render(self) -> np.ndarray:
        """A 32x32 picture: the target in red, the point in green."""
        img = np.zeros((32, 32, 3), dtype=np.uint8)
        for pos, channel in ((self._target, 0), (self._pos, 1)):
            x, y = (np.clip(pos / (2 * max(self.scale, 1.0)) + 0.5, 0, 1) * 31).astype(int)
            img[max(0, y - 1) : y + 2, max(0, x - 1) : x + 2, channel] = 255
        return img

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        self._pos = self._pos + SPEED * action
        self._t += 1
        dist = float(np.linalg.norm(self._target - self._pos))
        success = dist < REACH
        return self._obs(), -dist, success, self._t >= self.max_steps, {"is_success": success}


def _expert(features: dict[str, Any]) -> np.ndarray:
    state = np.asarray(features["observation.environment_state"])
    return np.clip((state[2:4] - state[0:2]) / SPEED, -1.0, 1.0).astype(np.float32)


@register_benchmark("fake")
@dataclass(frozen=True)
class FakeConfig(BenchmarkConfig):
    """Deterministic point-reaching tasks (near, mid, far; group `all`)."""

    task: str = opt("all", "near, mid, far, a comma list, or the group `all`")
    max_steps: int = opt(20, "step limit of the env itself (truncation)")
    step_sleep_s: float = opt(
        0.0, "seconds every step sleeps: a slow simulator, for tests that kill or interrupt a run (results unchanged)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step_sleep_s < 0:
            raise ConfigError(f"--env.step_sleep_s={self.step_sleep_s} is not allowed; it must be >= 0")
        for name in split_tasks(self.task):
            if name not in TASKS and name not in GROUPS:
                raise ConfigError(
                    f"--env.task={name!r} is not a fake task; known: {', '.join([*TASKS, *GROUPS])}"
                )

    def tasks(self) -> dict[str, list[str]]:
        return {name: GROUPS.get(name, [name]) for name in split_tasks(self.task)}

    def make_task_env(self, task: str) -> gym.Env:
        return CountdownEnv(TASKS[task], self.max_steps, self.step_sleep_s)

    def max_episode_steps(self, task: str) -> int:
        return self.max_steps

    def task_description(self, task: str) -> str:
        return f"reach a {task} target"

    @property
    def step_cost_ms(self) -> float:
        return 0.02

    def video_frame_ms(self, size: int) -> float:
        return 0.01  # a 32x32 numpy picture

    @property
    def features(self) -> dict[str, Feature]:
        return {
            "observation.state": Feature("STATE", (2,)),
            "observation.environment_state": Feature("ENV", (4,)),
            "action": Feature("ACTION", (2,)),
        }

    def expert(self, task: str) -> Callable[[dict[str, Any]], np.ndarray]:
        return _expert
