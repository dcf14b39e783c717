"""PushT (gym-pusht), configured as LeRobot's PushT env: `PushT-v0`, 300 steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import gymnasium as gym

from rollbench.config.env import BenchmarkConfig, Feature, register_benchmark
from rollbench.config.fields import opt
from rollbench.errors import ConfigError

EPISODE_LENGTH = 300


@register_benchmark("pusht")
@dataclass(frozen=True)
class PushTConfig(BenchmarkConfig):
    """Push a T-shaped block onto a target (2-D, pymunk); success at 95% coverage."""

    extra = "pusht"
    fps = 10

    task: str = opt("PushT-v0", "the gym-pusht env id (PushT-v0)")
    obs_type: Literal["pixels_agent_pos", "state", "environment_state_agent_pos"] = opt(
        "pixels_agent_pos", "what the policy sees"
    )
    visualization_width: int = opt(384, "width of rendered frames (videos)")
    visualization_height: int = opt(384, "height of rendered frames (videos)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task != "PushT-v0":
            raise ConfigError(f"--env.task={self.task!r} is not a PushT task; the only one is PushT-v0")

    @classmethod
    def required_modules(cls) -> dict[str, str]:
        return {"gym_pusht": "gym-pusht"}

    def tasks(self) -> dict[str, list[str]]:
        return {"pusht": [self.task]}

    def make_task_env(self, task: str) -> gym.Env:
        # optional: gym-pusht (the pusht extra); importing it registers the env ids
        import gym_pusht  # noqa: F401

        return gym.make(
            f"gym_pusht/{task}",
            obs_type=self.obs_type,
            render_mode="rgb_array",
            visualization_width=self.visualization_width,
            visualization_height=self.visualization_height,
            max_episode_steps=self.effective_max_steps(task),
        )

    def max_episode_steps(self, task: str) -> int:
        return EPISODE_LENGTH

    @property
    def step_cost_ms(self) -> float:
        return 5.0  # pymunk + pygame rendering, measured here ~5 ms

    def video_frame_ms(self, size: int) -> float:
        # pygame draws the frame at --env.visualization_width x _height (not --eval.video_size):
        # measured here 1.6 ms at 384²
        return 1.6 * self.visualization_width * self.visualization_height / 384**2

    def task_description(self, task: str) -> str:
        return "Push the T-shaped block onto the T-shaped target."

    def policy_task(self, task: str) -> str:
        # lerobot-eval reads the instruction from its env (add_envs_task); gym.make's wrappers
        # around gym-pusht's env show none, so its policies get "" (a VLA trained on the dataset's
        # instruction too): the same here, or a VLA's episodes would not be lerobot-eval's
        return ""

    @property
    def features(self) -> dict[str, Feature]:
        out = {"action": Feature("ACTION", (2,))}
        if self.obs_type == "state":
            out["observation.state"] = Feature("STATE", (5,))
        else:
            out["observation.state"] = Feature("STATE", (2,))
        if self.obs_type == "pixels_agent_pos":
            out["observation.image"] = Feature("VISUAL", (96, 96, 3))
        if self.obs_type == "environment_state_agent_pos":
            out["observation.environment_state"] = Feature("ENV", (16,))
        return out
