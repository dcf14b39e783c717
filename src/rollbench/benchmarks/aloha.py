"""ALOHA (gym-aloha): bimanual insertion and cube transfer, configured as LeRobot's AlohaEnv.

Tasks `AlohaInsertion-v0` and `AlohaTransferCube-v0`, 400 steps, 50 fps, success when the
reward reaches 4 (`info["is_success"]`, which also terminates the episode). Keys as LeRobot
names them: the `top` camera -> `observation.images.top`, the 14 joint positions ->
`observation.state`.

Two departures from gym-aloha, both for speed and safety, neither changing an episode:

- gym-aloha's task renders three 640x480 cameras (`top`, `angle`, `front_close`) on every
  step and the env returns only `top`: measured here 175 ms/step against 9.5 ms when only
  `top` is rendered. The task's `get_observation` is replaced by one that renders only the
  cameras the observation holds (none for `--env.obs_type=state`).
- gym-aloha builds its MuJoCo physics in `__init__`; here it is built on the first reset,
  in the process that steps it, so no simulator or GL context crosses a process boundary.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rollbench.benchmarks.frames import MujocoVideoCamera, frame_shape
from rollbench.config.env import BenchmarkConfig, Feature, register_benchmark, split_tasks
from rollbench.config.fields import opt
from rollbench.errors import ConfigError, unknown_choice
from rollbench.lerobot_line import prompts_from_the_inner_env

#: env id -> (gym-aloha's task name, dimension of its environment state: object poses)
TASKS: dict[str, tuple[str, int]] = {
    "AlohaInsertion-v0": ("insertion", 14),  # peg and socket, 7 each (xyz + quaternion)
    "AlohaTransferCube-v0": ("transfer_cube", 7),  # the cube
}
DESCRIPTIONS = {
    "AlohaInsertion-v0": "Insert the peg into the socket",
    "AlohaTransferCube-v0": "Pick up the cube with the right arm and transfer it to the left arm",
}
EPISODE_LENGTH = 400  # LeRobot's AlohaEnv (gym-aloha registers 300)
STATE_DIM = 14  # per arm: 6 joints + gripper
CAMERA = "top"  # the only camera gym-aloha's observations carry


def _render_only(task: Any, cameras: tuple[str, ...], height: int, width: int) -> None:
    """Make a gym-aloha task render only `cameras` at height x width in its observations."""

    def get_observation(physics: Any) -> collections.OrderedDict[str, Any]:
        obs: collections.OrderedDict[str, Any] = collections.OrderedDict()
        obs["qpos"] = task.get_qpos(physics)
        obs["qvel"] = task.get_qvel(physics)
        obs["env_state"] = task.get_env_state(physics)
        obs["images"] = {cam: physics.render(height=height, width=width, camera_id=cam) for cam in cameras}
        return obs

    task.get_observation = get_observation


@functools.cache
def _lean_env_class() -> type:
    """gym-aloha's AlohaEnv with lean observations (defined on first use: imports gym_aloha)."""
    from gym_aloha.env import AlohaEnv  # optional: gym-aloha (the aloha extra)

    class LeanAlohaEnv(AlohaEnv):  # type: ignore[misc]
        """AlohaEnv (its seeding, reset, reward and success) rendering only what is returned."""

        def __init__(self, task: str, obs_type: str, height: int, width: int, fast_render: bool) -> None:
            # gym-aloha has no `state` observations; its own spaces are replaced by ours
            super().__init__(task, obs_type="pixels_agent_pos", observation_width=width, observation_height=height)
            self.lean_obs_type = obs_type
            cameras = () if obs_type == "state" else (CAMERA,)
            if fast_render:  # read when the GL context is made, on the first render
                model = self._env.physics.model
                model.vis.quality.offsamples = 0
                model.light_castshadow[:] = 0
            _render_only(self._env.task, cameras, height, width)

        def _format_raw_obs(self, raw_obs: Any) -> dict[str, np.ndarray]:
            return format_obs(self.lean_obs_type, raw_obs)

    return LeanAlohaEnv


def format_obs(obs_type: str, raw_obs: Any) -> dict[str, np.ndarray]:
    """gym-aloha's raw observation -> a flat dict (keys in `AlohaConfig.features_map`)."""
    out: dict[str, np.ndarray] = {}
    if obs_type != "pixels":
        out["agent_pos"] = np.asarray(raw_obs["qpos"], dtype=np.float64)
    if obs_type == "state":
        out["environment_state"] = np.asarray(raw_obs["env_state"], dtype=np.float64)
    else:
        out[CAMERA] = raw_obs["images"][CAMERA].copy()
    return out


class AlohaTaskEnv(gym.Env):
    """One ALOHA task; the simulator is built on the first reset."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, task: str, obs_type: str, height: int, width: int, fast_render: bool = False) -> None:
        self.task_name, env_state_dim = TASKS[task]
        self.fast_render = fast_render
        self.obs_type = obs_type
        self.height, self.width = height, width
        self.render_mode = "rgb_array"
        spaces: dict[str, gym.Space[Any]] = {}
        if obs_type != "pixels":
            spaces["agent_pos"] = gym.spaces.Box(-1000.0, 1000.0, (STATE_DIM,), np.float64)
        if obs_type == "state":
            spaces["environment_state"] = gym.spaces.Box(-1000.0, 1000.0, (env_state_dim,), np.float64)
        else:
            spaces[CAMERA] = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (STATE_DIM,), np.float32)  # as gym-aloha's
        self._env: Any = None
        self._last: dict[str, np.ndarray] = {}
        self._video: MujocoVideoCamera | None = None  # state observations: video frames of their own

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if self._env is None:
            self._env = _lean_env_class()(self.task_name, self.obs_type, self.height, self.width, self.fast_render)
        obs, info = self._env.reset(seed=seed)
        self._last = obs
        return obs, info

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._env.step(np.asarray(action))
        self._last = obs
        info["is_success"] = bool(info["is_success"])
        return obs, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> np.ndarray:
        """The `top` frame of the last observation (rendered only when it has none)."""
        if CAMERA in self._last:
            return self._last[CAMERA]
        if self._env is None:
            raise RuntimeError("render() before reset()")
        return np.asarray(self._env._env.physics.render(height=self.height, width=self.width, camera_id=CAMERA))

    def render_video(self, size: int) -> np.ndarray:
        """The video frame (`benchmarks/frames.py`): the observation's `top` frame when there
        is one; for state observations a `top` frame of its own, `size` on its longer side,
        without multisampling, shadows or reflections (~12 ms at 256x192 here, against 112 ms for a
        default 640x480 frame)."""
        if CAMERA in self._last:
            return self._last[CAMERA]
        if self._env is None:
            raise RuntimeError("render_video() before reset()")
        physics = self._env._env.physics
        width, height = frame_shape(size, self.width, self.height)
        if self._video is None or (self._video.width, self._video.height) != (width, height):
            self._close_video()
            self._video = MujocoVideoCamera(physics.model.ptr, CAMERA, width, height)
        return self._video.render(physics.data.ptr)

    def _close_video(self) -> None:
        if self._video is not None:
            self._video.close()
            self._video = None

    def close(self) -> None:
        self._close_video()
        if self._env is not None:
            self._env.close()
            self._env = None


@register_benchmark("aloha")
@dataclass(frozen=True)
class AlohaConfig(BenchmarkConfig):
    """ALOHA bimanual manipulation (gym-aloha): insertion and cube transfer."""

    extra = "aloha"
    fps = 50

    task: str = opt("AlohaInsertion-v0", "AlohaInsertion-v0, AlohaTransferCube-v0, or a comma list")
    obs_type: Literal["pixels_agent_pos", "pixels", "state"] = opt(
        "pixels_agent_pos",
        "pixels_agent_pos: top camera + 14 joint positions; pixels: top camera; "
        "state: joint positions + object poses (no rendering; not in gym-aloha or LeRobot)",
    )
    observation_height: int = opt(480, "height of the top camera's images")
    observation_width: int = opt(640, "width of the top camera's images")
    fast_render: bool = opt(
        False, "render without multisampling and shadows: ~6x faster frames on a CPU, but images differ from gym-aloha's"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        names = split_tasks(self.task)
        if not names:
            raise ConfigError(f"--env.task is empty; known: {', '.join(TASKS)}")
        for name in names:
            if name not in TASKS:
                raise unknown_choice("--env.task", name, list(TASKS), "an ALOHA task")
        if self.observation_width < 1 or self.observation_height < 1:
            raise ConfigError("--env.observation_width and --env.observation_height must be >= 1")

    @classmethod
    def required_modules(cls) -> dict[str, str]:
        return {"gym_aloha": "gym-aloha", "dm_control": "dm-control", "mujoco": "mujoco==3.3.0"}

    def tasks(self) -> dict[str, list[str]]:
        return {"aloha": list(dict.fromkeys(split_tasks(self.task)))}

    def list_groups(self) -> dict[str, list[str]]:
        return {"aloha": list(TASKS)}

    def make_task_env(self, task: str) -> gym.Env:
        return AlohaTaskEnv(task, self.obs_type, self.observation_height, self.observation_width, self.fast_render)

    def max_episode_steps(self, task: str) -> int:
        return EPISODE_LENGTH

    def task_description(self, task: str) -> str:
        return DESCRIPTIONS.get(task, task)

    def policy_task(self, task: str) -> str:
        # lerobot-eval's prompt: 0.6 finds gym-aloha's own `task` under gym.make's wrappers
        # ("insertion"); 0.4.4 looks at the outer wrapper only, which has none ("")
        return TASKS[task][0] if prompts_from_the_inner_env() else ""

    @property
    def step_cost_ms(self) -> float:
        # measured here (loaded): a state step 1 ms; one 640x480 Mesa frame 112 ms, 17 ms fast
        if self.obs_type == "state":
            return 1.0
        return 20.0 if self.fast_render else 60.0

    def video_frame_ms(self, size: int) -> float:
        # pixel observations: the video reuses the observation's frame; state: a fast `top`
        # frame of its own, measured here 12 ms at 256x192, 16 ms at 640x480
        return 0.0 if self.obs_type != "state" else 10.0 + 0.02 * size * size / 1000

    @property
    def features_map(self) -> dict[str, str]:
        return {
            CAMERA: f"observation.images.{CAMERA}",
            "agent_pos": "observation.state",
            "environment_state": "observation.environment_state",
        }

    @property
    def features(self) -> dict[str, Feature]:
        out = {"action": Feature("ACTION", (STATE_DIM,))}
        if self.obs_type != "pixels":
            out["observation.state"] = Feature("STATE", (STATE_DIM,))
        if self.obs_type == "state":
            dims = {TASKS[name][1] for name in split_tasks(self.task)}
            if len(dims) == 1:  # mixed tasks have object poses of different sizes
                out["observation.environment_state"] = Feature("ENV", (dims.pop(),))
        else:
            out[f"observation.images.{CAMERA}"] = Feature("VISUAL", (self.observation_height, self.observation_width, 3))
        return out

    def expert(self, task: str) -> Callable[[dict[str, Any]], np.ndarray]:
        raise ConfigError(
            "--policy.type=expert: gym-aloha ships no scripted policy for --env.type=aloha; "
            "benchmarks with one: metaworld, fake"
        )
