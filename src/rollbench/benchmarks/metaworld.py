"""MetaWorld v3 (MT1 tasks, MT10, MT50, difficulty groups) with its scripted experts.

Each task is built as LeRobot's MetaWorld wrapper builds it (`MT1(task, seed=42)`, its
first train task, `_freeze_rand_vec = False`, the episode ends at the first step with
`info["success"]` or at `max_path_length`), so numbers compare with `lerobot-eval`'s, with
one deliberate fix: MetaWorld's `reset()` ignores its seed and draws each goal from the
global `np.random`, so `lerobot-eval` cannot reproduce a MetaWorld episode. Here every
reset first calls `env.seed(unit_seed)` with `seeded_rand_vec = True`: an episode's goal
is a function of its seed alone.
"""

from __future__ import annotations

import functools
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rollbench.benchmarks.frames import MujocoVideoCamera, frame_shape, free_render_objects
from rollbench.benchmarks.native import NativeScene
from rollbench.caches import cache_root
from rollbench.config.env import BenchmarkConfig, Feature, register_benchmark, split_tasks
from rollbench.config.fields import opt
from rollbench.errors import ConfigError, did_you_mean

MAX_PATH_LENGTH = 500
AGENT_POS_DIM = 4  # hand xyz + gripper opening: the first 4 of the 39-d state
STATE_DIM = 39

# Difficulty groups as MetaWorld's paper (and LeRobot) define them.
DIFFICULTY: dict[str, tuple[str, ...]] = {
    "easy": (
        "button-press-v3", "button-press-topdown-v3", "button-press-topdown-wall-v3",
        "button-press-wall-v3", "coffee-button-v3", "dial-turn-v3", "door-close-v3",
        "door-lock-v3", "door-open-v3", "door-unlock-v3", "drawer-close-v3", "drawer-open-v3",
        "faucet-close-v3", "faucet-open-v3", "handle-press-v3", "handle-press-side-v3",
        "handle-pull-v3", "handle-pull-side-v3", "lever-pull-v3", "plate-slide-v3",
        "plate-slide-back-v3", "plate-slide-back-side-v3", "plate-slide-side-v3", "reach-v3",
        "reach-wall-v3", "window-close-v3", "window-open-v3", "peg-unplug-side-v3",
    ),
    "medium": (
        "basketball-v3", "bin-picking-v3", "box-close-v3", "coffee-pull-v3", "coffee-push-v3",
        "hammer-v3", "peg-insert-side-v3", "push-wall-v3", "soccer-v3", "sweep-v3", "sweep-into-v3",
    ),
    "hard": ("assembly-v3", "hand-insert-v3", "pick-out-of-hole-v3", "pick-place-v3", "push-v3", "push-back-v3"),
    "very_hard": ("shelf-place-v3", "disassemble-v3", "stick-pull-v3", "stick-push-v3", "pick-place-wall-v3"),
}

DESCRIPTIONS = {
    "assembly-v3": "Pick up a nut and place it onto a peg",
    "basketball-v3": "Dunk the basketball into the basket",
    "bin-picking-v3": "Grasp the puck from one bin and place it into another bin",
    "box-close-v3": "Grasp the cover and close the box with it",
    "button-press-topdown-v3": "Press a button from the top",
    "button-press-topdown-wall-v3": "Bypass a wall and press a button from the top",
    "button-press-v3": "Press a button",
    "button-press-wall-v3": "Bypass a wall and press a button",
    "coffee-button-v3": "Push a button on the coffee machine",
    "coffee-pull-v3": "Pull a mug from a coffee machine",
    "coffee-push-v3": "Push a mug under a coffee machine",
    "dial-turn-v3": "Rotate a dial 180 degrees",
    "disassemble-v3": "Pick a nut out of a peg",
    "door-close-v3": "Close a door with a revolving joint",
    "door-lock-v3": "Lock the door by rotating the lock clockwise",
    "door-open-v3": "Open a door with a revolving joint",
    "door-unlock-v3": "Unlock the door by rotating the lock counter-clockwise",
    "hand-insert-v3": "Insert the gripper into a hole",
    "drawer-close-v3": "Push and close a drawer",
    "drawer-open-v3": "Open a drawer",
    "faucet-open-v3": "Rotate the faucet counter-clockwise",
    "faucet-close-v3": "Rotate the faucet clockwise",
    "hammer-v3": "Hammer a screw on the wall",
    "handle-press-side-v3": "Press a handle down sideways",
    "handle-press-v3": "Press a handle down",
    "handle-pull-side-v3": "Pull a handle up sideways",
    "handle-pull-v3": "Pull a handle up",
    "lever-pull-v3": "Pull a lever down 90 degrees",
    "peg-insert-side-v3": "Insert a peg sideways",
    "pick-place-wall-v3": "Pick a puck, bypass a wall and place the puck",
    "pick-out-of-hole-v3": "Pick up a puck from a hole",
    "reach-v3": "Reach a goal position",
    "push-back-v3": "Push the puck to a goal",
    "push-v3": "Push the puck to a goal",
    "pick-place-v3": "Pick and place a puck to a goal",
    "plate-slide-v3": "Slide a plate into a cabinet",
    "plate-slide-side-v3": "Slide a plate into a cabinet sideways",
    "plate-slide-back-v3": "Get a plate from the cabinet",
    "plate-slide-back-side-v3": "Get a plate from the cabinet sideways",
    "peg-unplug-side-v3": "Unplug a peg sideways",
    "soccer-v3": "Kick a soccer into the goal",
    "stick-push-v3": "Grasp a stick and push a box using the stick",
    "stick-pull-v3": "Grasp a stick and pull a box with the stick",
    "push-wall-v3": "Bypass a wall and push a puck to a goal",
    "reach-wall-v3": "Bypass a wall and reach a goal",
    "shelf-place-v3": "Pick and place a puck onto a shelf",
    "sweep-into-v3": "Sweep a puck into a hole",
    "sweep-v3": "Sweep a puck off the table",
    "window-open-v3": "Push and open a window",
    "window-close-v3": "Push and close a window",
}

CORNER2_POS = (0.75, 0.075, 0.7)  # LeRobot's corner2 camera placement


def all_tasks() -> list[str]:
    """Every MT1 task name of the installed metaworld."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS  # optional: metaworld (the metaworld extra)

    return list(ALL_V3_ENVIRONMENTS)


def groups() -> dict[str, list[str]]:
    from metaworld.env_dict import MT10_V3  # optional: metaworld (the metaworld extra)

    return {"mt10": list(MT10_V3), "mt50": all_tasks(), **{k: list(v) for k, v in DIFFICULTY.items()}}


def _cache_dir() -> Path:
    return cache_root() / f"metaworld-{metadata.version('metaworld')}"


@functools.lru_cache(maxsize=64)
def _first_train_task(task: str) -> tuple[Any, Any]:
    """(env class, first train task of `MT1(task, seed=42)`), as LeRobot builds them.

    MT1's constructor builds the env and samples 50 goals (~0.9 s here, 4x the env itself),
    so the task it yields is computed once and kept on disk, per metaworld version.
    """
    import metaworld  # optional: metaworld (the metaworld extra)
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS  # optional: metaworld

    path = _cache_dir() / f"{task}-mt1-seed42-train0.pkl"
    try:
        with open(path, "rb") as fh:
            return ALL_V3_ENVIRONMENTS[task], pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
        pass
    mt1 = metaworld.MT1(task, seed=42)
    first = mt1.train_tasks[0]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        with open(tmp, "wb") as fh:
            pickle.dump(first, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs the 0.9 s again
    return mt1.train_classes[task], first


class MetaWorldTaskEnv(gym.Env):
    """One MetaWorld task; the simulator is built on the first reset."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 80}

    def __init__(self, task: str, obs_type: str, width: int, height: int, camera_name: str, fast: bool = False) -> None:
        self.task = task
        self.fast = fast
        self.obs_type = obs_type
        self.width, self.height, self.camera_name = width, height, camera_name
        self.render_mode = "rgb_array"
        self._env: Any = None
        # the frame of the current state, once rendered: a pixel observation and a video
        # frame of the same step are one render, not two (a 480² CPU frame is ~100 ms)
        self._frame: np.ndarray | None = None
        self._video: MujocoVideoCamera | None = None  # state observations: video frames of their own
        # set by rollbench's schedulers before every reset (BenchmarkConfig.native_axes)
        self.native_condition = ""
        self._native = NativeScene()
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        spaces: dict[str, gym.Space] = {
            "agent_pos": gym.spaces.Box(-1000.0, 1000.0, (AGENT_POS_DIM,), np.float64)
        }
        if obs_type == "state":
            spaces["environment_state"] = gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float64)
        else:
            spaces["pixels"] = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)

    def _build(self) -> Any:
        env_cls, first_task = _first_train_task(self.task)
        # rgb_array always: MuJoCo creates no GL context until the first render (videos of
        # state runs render; state runs without videos never do)
        env = env_cls(render_mode="rgb_array", camera_name=self.camera_name, width=self.width, height=self.height)
        if self.fast:
            # 4x multisampling and 4096² shadow maps make a CPU frame 5-15x slower (71 -> 14 ms at 256²)
            env.model.vis.quality.offsamples = 0
            env.model.light_castshadow[:] = 0
        env.set_task(first_task)
        if self.camera_name == "corner2":
            env.model.cam_pos[2] = CORNER2_POS
        env.reset()
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True
        return env

    def _format(self, raw: np.ndarray) -> dict[str, np.ndarray]:
        out = {"agent_pos": raw[:AGENT_POS_DIM].astype(np.float64)}
        if self.obs_type == "state":
            out["environment_state"] = raw.astype(np.float64)
        else:
            out["pixels"] = self.render()
        return out

    def render(self) -> np.ndarray:
        if self._frame is None:
            self._frame = self._render()
        return self._frame.copy()  # the caller may keep or change it; the cache stays intact

    def _render(self) -> np.ndarray:
        viewer = self._env.mujoco_renderer.viewer
        if viewer is not None:
            # Closing another env in this process (a worker closing a finished task's env)
            # releases the thread's current GL context: MuJoCo's EGL `free()` calls
            # eglReleaseThread. This env's frames then come back black, without an error.
            viewer.make_context_current()
        return self._upright(self._env.render())

    def _upright(self, image: np.ndarray) -> np.ndarray:
        if self.camera_name == "corner2":
            image = np.flip(image, (0, 1))  # this camera's images come upside down and mirrored
        return np.ascontiguousarray(image)

    def render_video(self, size: int) -> np.ndarray:
        """The video frame of the current state (`benchmarks/frames.py`): with pixel
        observations the observation's own frame (one render per step, the policy's
        settings); with state observations a frame of its own, `size` on its longer side,
        without multisampling, shadows or reflections, from a render context the env never uses."""
        if self.obs_type != "state":
            return self.render()
        if self._env is None:
            raise RuntimeError("render_video() before reset()")
        width, height = frame_shape(size, self.width, self.height)
        if self._video is None or (self._video.width, self._video.height) != (width, height):
            self._close_video()
            self._video = MujocoVideoCamera(self._env.model, self.camera_name, width, height)
        return self._upright(self._video.render(self._env.data))

    def _close_video(self) -> None:
        if self._video is not None:
            self._video.close()
            self._video = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if self._env is None:
            self._env = self._build()
        if seed is not None:
            self._env.seed(int(seed))
        self._frame = None
        env = self._env
        self._native.restore()
        raw, _ = env.reset()
        if self._native.apply(env.model, env.data, self.native_condition, seed, [self.camera_name]):
            # observe again (objects may have moved), the previous frame's half of the state equal to
            # the current, as MetaWorld's reset makes it; its reward shaping keeps the placement before
            # an object shift
            env._prev_obs = env._get_curr_obs_combined_no_goal()
            raw = env._get_obs().astype(np.float64)
        return self._format(raw), {"is_success": False}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._frame = None
        raw, reward, _, truncated, info = self._env.step(np.asarray(action))
        success = bool(info.get("success", 0))
        info["is_success"] = success
        return self._format(raw), float(reward), success, bool(truncated), info

    def close(self) -> None:
        self._frame = None
        self._close_video()
        if self._env is not None:
            free_render_objects(self._env)  # in this env's GL context, never another env's
            self._env.close()
            self._env = None


@register_benchmark("metaworld")
@dataclass(frozen=True)
class MetaWorldConfig(BenchmarkConfig):
    """MetaWorld v3: 50 manipulation tasks with scripted experts."""

    extra = "metaworld"
    fps = 80
    native_axes = frozenset({"camera.shift", "camera.rotate", "light.intensity", "object.shift"})

    task: str = opt("mt10", "a task (e.g. push-v3), a comma list, mt10, mt50, easy, medium, hard, very_hard")
    obs_type: Literal["state", "pixels_agent_pos"] = opt(
        "state", "state: 39-d vector + 4-d hand/gripper; pixels_agent_pos: camera image + 4-d hand/gripper"
    )
    observation_width: int = opt(480, "image width for pixels_agent_pos")
    observation_height: int = opt(480, "image height for pixels_agent_pos")
    camera_name: str = opt("corner2", "MuJoCo camera for pixels_agent_pos and videos")
    render_quality: Literal["default", "fast"] = opt(
        "default",
        "fast: no multisampling, no shadows (5-15x faster on CPU; images differ from what policies were trained on)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not split_tasks(self.task):
            raise ConfigError("--env.task is empty; give a task, a comma list or a group (mt10, mt50, easy, ...)")
        if self.episode_length is not None and self.episode_length > MAX_PATH_LENGTH:
            raise ConfigError(
                f"--env.episode_length={self.episode_length} is not allowed for metaworld; "
                f"MetaWorld stops every episode at {MAX_PATH_LENGTH} steps"
            )
        if self.observation_width < 1 or self.observation_height < 1:
            raise ConfigError("--env.observation_width and --env.observation_height must be >= 1")

    @classmethod
    def required_modules(cls) -> dict[str, str]:
        return {"metaworld": "metaworld>=3.0.0,<3.2", "mujoco": "mujoco==3.3.0"}

    def tasks(self) -> dict[str, list[str]]:
        known = groups()
        names = set(all_tasks())
        out: dict[str, list[str]] = {}
        for item in split_tasks(self.task):
            if item in known:
                out[item] = known[item]
            elif item in names:
                out[item] = [item]
            else:
                raise ConfigError(
                    f"--env.task={item!r} is not a MetaWorld task or group.{did_you_mean(item, [*known, *names])} "
                    f"Groups: {', '.join(known)}; tasks: see `rollbench list`."
                )
        return out

    def list_groups(self) -> dict[str, list[str]]:
        """Every group (mt10, mt50 = all tasks, difficulty groups), for `rollbench list`."""
        return groups()

    def make_task_env(self, task: str) -> gym.Env:
        return MetaWorldTaskEnv(
            task, self.obs_type, self.observation_width, self.observation_height, self.camera_name,
            fast=self.render_quality == "fast",
        )

    def max_episode_steps(self, task: str) -> int:
        return MAX_PATH_LENGTH

    @property
    def step_cost_ms(self) -> float:
        # measured here: state steps 0.2-0.5 ms; a 480x480 Mesa frame 17-90 ms
        return 0.5 if self.obs_type == "state" else 40.0

    def video_frame_ms(self, size: int) -> float:
        # pixel observations: the video reuses the observation's frame. State: a fast frame,
        # measured here (Mesa llvmpipe, one core, quiet) 7.5 ms at 128², 11.5 ms at 256², 13.6 ms
        # at 480² (the scene's geometry, not its pixels, is most of the cost)
        return 0.0 if self.obs_type != "state" else 7.0 + 0.07 * size * size / 1000

    def task_description(self, task: str) -> str:
        return DESCRIPTIONS.get(task, task)

    @property
    def features(self) -> dict[str, Feature]:
        out = {"observation.state": Feature("STATE", (AGENT_POS_DIM,)), "action": Feature("ACTION", (4,))}
        if self.obs_type == "state":
            out["observation.environment_state"] = Feature("ENV", (STATE_DIM,))
        else:
            out["observation.image"] = Feature("VISUAL", (self.observation_height, self.observation_width, 3))
        return out

    def check_expert(self) -> None:
        if self.obs_type != "state":
            raise ConfigError(
                "--policy.type=expert needs --env.obs_type=state: MetaWorld's scripted experts read the 39-d state"
            )

    def expert(self, task: str) -> Callable[[dict[str, Any]], np.ndarray]:
        self.check_expert()
        from metaworld.policies import ENV_POLICY_MAP  # optional: metaworld (the metaworld extra)

        scripted = ENV_POLICY_MAP[task]()  # type: ignore[abstract]

        def act(features: dict[str, Any]) -> np.ndarray:
            return np.asarray(scripted.get_action(features["observation.environment_state"]), dtype=np.float32)

        return act
