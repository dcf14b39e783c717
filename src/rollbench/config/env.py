"""Benchmarks: registered config classes that own how their environments are made.

`--env.type=<name>` picks a subclass of `BenchmarkConfig`; the remaining `--env.*` flags
are its fields. A benchmark knows its tasks, how to build one task's env (lazily: nothing
GPU- or GL-bound may be created in `__init__`, so nothing of that kind crosses a fork), how
long an episode may run, how its observations map to LeRobot feature keys, and how to read
success from an `info` dict. No factory anywhere branches on the type name.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rollbench import forkserver
from rollbench.config.fields import opt
from rollbench.errors import BenchmarkUnavailable, ConfigError
from rollbench.registry import Registry

if TYPE_CHECKING:
    import gymnasium as gym
    from gymnasium.vector import VectorEnv

BENCHMARKS: Registry[type[BenchmarkConfig]] = Registry("benchmark", "rollbench.benchmarks")

# Built-in benchmarks, imported only when named (their simulators are heavy).
for _name, _target in {
    "metaworld": "rollbench.benchmarks.metaworld:MetaWorldConfig",
    "pusht": "rollbench.benchmarks.pusht:PushTConfig",
    "gym": "rollbench.benchmarks.gym:GymConfig",
    "fake": "rollbench.benchmarks.fake:FakeConfig",
    "hub": "rollbench.benchmarks.envhub:HubConfig",
    "aloha": "rollbench.benchmarks.aloha:AlohaConfig",
    "libero": "rollbench.benchmarks.libero:LiberoConfig",
    "lerobot": "rollbench.benchmarks.lerobot_env:LerobotEnvConfig",
}.items():
    BENCHMARKS.add_lazy(_name, _target)


def register_benchmark(name: str) -> Callable[[type[BenchmarkConfig]], type[BenchmarkConfig]]:
    """Class decorator: make a `BenchmarkConfig` subclass selectable as `--env.type=name`."""

    def deco(cls: type[BenchmarkConfig]) -> type[BenchmarkConfig]:
        cls.type_name = name
        return BENCHMARKS.register(name)(cls)

    return deco


@dataclass(frozen=True)
class Feature:
    """One observation or action feature, in LeRobot's terms."""

    type: str  # "STATE", "ENV", "VISUAL" or "ACTION"
    shape: tuple[int, ...]


ObsProcessor = Callable[[dict[str, Any]], dict[str, Any]]
ActionProcessor = Callable[[np.ndarray], np.ndarray]


def identity(x: Any) -> Any:
    return x


#: the env attribute that holds the index (within its task) of the episode the next reset starts
EPISODE_INDEX_ATTR = "episode_index"


def _make_with_environ(environ: Mapping[str, str], make: Callable[[], Any]) -> Any:
    """`make()` in a process whose environment first takes `environ` (an async env's sub-process)."""
    os.environ.update(environ)
    return make()


#: the env attribute that holds the --eval.perturb condition of the episode the next reset starts
CONDITION_ATTR = "native_condition"


def set_episode_index(bench: BenchmarkConfig, env: Any, indices: Sequence[int]) -> None:
    """Before a reset: tell `env` (one env, or a vector env with one index per sub-env)
    which episode each reset starts, if the benchmark's envs use it.

    An attribute, not `reset(options=...)`: a vector env passes one options dict to all
    its sub-envs, while `VectorEnv.set_attr` takes one value per sub-env (sync and async).
    """
    if bench.uses_episode_index:
        _stage(env, EPISODE_INDEX_ATTR, [int(i) for i in indices])


def set_condition(bench: BenchmarkConfig, env: Any, conditions: Sequence[str]) -> None:
    """Before a reset: tell `env` (one env, or a vector env with one per sub-env) the
    --eval.perturb condition of each reset's episode ("" for the control), if the benchmark
    applies native axes (`native_axes`): the env applies the condition's native levels in
    that reset, as `set_episode_index` stages the index."""
    if bench.native_axes:
        _stage(env, CONDITION_ATTR, list(conditions))


def _stage(env: Any, attr: str, values: list[Any]) -> None:
    if hasattr(env, "set_attr"):  # a gymnasium VectorEnv
        env.set_attr(attr, values)
    else:
        (value,) = values
        env.set_wrapper_attr(attr, value)


def success_from_info(info: Mapping[str, Any]) -> bool | None:
    """Success as gymnasium-style envs report it, or None when the info says nothing."""
    final = info.get("final_info")
    if isinstance(final, Mapping):
        found = success_from_info(final)
        if found is not None:
            return found
    for key in ("is_success", "success"):
        if key in info:
            return bool(np.asarray(info[key]).any())
    return None


@dataclass(frozen=True)
class BenchmarkConfig:
    """Base of every benchmark. Subclasses are frozen dataclasses registered by name."""

    type_name: ClassVar[str] = ""
    #: pip extra that installs the simulator, for error messages
    extra: ClassVar[str] = ""
    #: frames per second of the simulation, for videos
    fps: ClassVar[int] = 30
    #: imports code named by the user: needs --trust_remote_code=true
    runs_user_code: ClassVar[bool] = False
    #: its envs choose an episode's start from the episode's index (e.g. LIBERO's fixed
    #: initial states): both schedulers set the env attribute `EPISODE_INDEX_ATTR` to the
    #: unit's episode index before every reset (`set_episode_index`)
    uses_episode_index: ClassVar[bool] = False
    #: the native --eval.perturb axes (`perturb.AXES`) its envs apply inside the simulator: both
    #: schedulers set the env attribute `CONDITION_ATTR` to the unit's condition before every
    #: reset (`set_condition`), and the env applies them in that reset and undoes them at the next
    native_axes: ClassVar[frozenset[str]] = frozenset()

    task: str = opt("", "task(s) to evaluate: one name, a comma list or a group")
    episode_length: int | None = opt(
        None, "maximum steps per episode (default: the benchmark's own limit)"
    )
    state_keys: tuple[str, ...] = opt(
        (), "dict observations: keys concatenated (flattened, in this order) into observation.state"
    )
    camera_keys: tuple[str, ...] = opt(
        (), "dict observations: image keys kept as observation.images.<name>; `key:name` renames"
    )

    def __post_init__(self) -> None:
        if self.episode_length is not None and self.episode_length < 1:
            raise ConfigError(
                f"--env.episode_length={self.episode_length} is not allowed; it must be >= 1"
            )

    # -- what a benchmark must define ------------------------------------------------
    def tasks(self) -> dict[str, list[str]]:
        """{task group (LeRobot's suite): [task name, ...]}; a task's `task_id` is its index."""
        raise NotImplementedError

    def make_task_env(self, task: str) -> gym.Env:
        """One env of `task`. Must be cheap: defer the simulator to the first reset."""
        raise NotImplementedError

    def max_episode_steps(self, task: str) -> int:
        raise NotImplementedError

    # -- what a benchmark may refine -------------------------------------------------
    def resolve(self) -> BenchmarkConfig:
        """This config with what it names outside this machine pinned (a hub repository's
        commit, downloaded once), so every process of the run sees the same thing; called
        once per run, in the driver, before anything is written. Default: itself."""
        return self

    def validate_tasks(self) -> None:
        """Raise ConfigError naming --env.task if a task does not exist; called before any
        output is written. The default asks `tasks()`, which raises for unknown names."""
        self.tasks()

    def list_groups(self) -> dict[str, list[str]]:
        """Every group of tasks this benchmark knows, for `rollbench list` (default: the
        groups of the configured tasks)."""
        return self.tasks()

    @classmethod
    def required_modules(cls) -> dict[str, str]:
        """{importable module: pip requirement} that the simulator needs."""
        return {}

    def check_available(self) -> None:
        """Raise BenchmarkUnavailable with the install line if a package is missing."""
        missing = [req for mod, req in self.required_modules().items() if importlib.util.find_spec(mod) is None]
        if missing:
            extra = self.extra or self.type_name
            raise BenchmarkUnavailable(
                f"benchmark {self.type_name!r} needs {', '.join(missing)}; install it with "
                f"`pip install 'rollbench[{extra}]'`."
            )

    def package_versions(self) -> dict[str, str]:
        out = {}
        for req in self.required_modules().values():
            name = req.split("=")[0].split("<")[0].split(">")[0].strip()
            try:
                out[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                out[name] = "not installed"
        return out

    def task_description(self, task: str) -> str:
        return task

    def policy_task(self, task: str) -> str:
        """The `task` string a policy gets beside each observation (a VLA's prompt), as
        lerobot-eval gives it: its env's `task_description` or `task` attribute, "" where the
        env has neither. Default: the task's description."""
        return self.task_description(task)

    @property
    def step_cost_ms(self) -> float:
        """Rough cost of one env step (with rendering) on one CPU core; sizes slots per worker."""
        return 1.0

    def video_frame_ms(self, size: int) -> float:
        """Rough cost of one video frame (its longer side `size`, `--eval.video_size`) on one
        CPU core, rendering only (0 when videos reuse the observation's frames); for the
        warning before a run whose videos would cost much of its time."""
        return 1.0

    def effective_max_steps(self, task: str) -> int:
        return self.episode_length or self.max_episode_steps(task)

    @property
    def features(self) -> dict[str, Feature]:
        """What the env produces, in LeRobot keys (plus "action")."""
        return {}

    @property
    def renders_obs(self) -> bool:
        """Its observations hold camera images: every step renders, whether or not the run films."""
        return any(ft.type == "VISUAL" for ft in self.features.values())

    @property
    def features_map(self) -> dict[str, str]:
        """Env observation key -> LeRobot key."""
        return {
            "agent_pos": "observation.state",
            "environment_state": "observation.environment_state",
            "pixels": "observation.image",
        }

    def to_features(self, obs: Any) -> dict[str, Any]:
        """Rename an env observation (single or batched) to LeRobot keys.

        Arrays stay numpy and images stay uint8 HWC: converting them for a network is the
        policy adapter's job, so that cheap policies pay nothing for it.
        """
        if not isinstance(obs, Mapping):
            return {"observation.state": obs}
        if self.state_keys or self.camera_keys:
            return select_keys(obs, self.state_keys, self.camera_keys)
        mapping = self.features_map
        out: dict[str, Any] = {}
        for key, value in obs.items():
            if key == "pixels" and isinstance(value, Mapping):
                for cam, img in value.items():
                    out[f"observation.images.{cam}"] = img
            else:
                out[mapping.get(key, f"observation.{key}")] = value
        return out

    def success(self, info: Mapping[str, Any]) -> bool:
        """The benchmark's success rule for one step's `info`."""
        return bool(success_from_info(info))

    def expert(self, task: str) -> Callable[[dict[str, Any]], np.ndarray]:
        """A scripted policy for `task`: features of one env -> one action."""
        raise ConfigError(
            f"--policy.type=expert: benchmark {self.type_name!r} has no scripted expert; "
            f"benchmarks with one: metaworld, fake"
        )

    def check_expert(self) -> None:
        """Raise the ConfigError `expert()` would, without importing the simulator.

        Benchmarks whose experts exist only for some configurations override this.
        """
        if type(self).expert is BenchmarkConfig.expert:
            self.expert("")

    def get_env_processors(self) -> tuple[ObsProcessor, ActionProcessor]:
        """(batch preprocessor, action postprocessor), applied around every policy call.

        The preprocessor takes and returns the LeRobot-keyed batch; the postprocessor
        takes and returns the (n, *action_shape) array. Identity by default.
        """
        return identity, identity

    def lerobot_observation(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The LeRobot-keyed batch (`to_features`) as LeRobot's `preprocess_observation` leaves
        it, before any env processor: what a policy that brings its own env processors reads
        (`Policy.env_processors`; X-VLA's). Identity by default; LIBERO nests its robot state."""
        return batch

    # -- vector envs (the lockstep path) ---------------------------------------------
    def make_vector_env(self, task: str, n_envs: int, use_async_envs: bool) -> VectorEnv:
        import gymnasium as gym  # heavy: gymnasium (~90 ms); `rollbench --help` imports this module

        if use_async_envs and n_envs > 1:
            # forkserver: a GL context or torch threads in this process must not be forked. Its
            # processes keep the environment the forkserver started with (an earlier run in
            # this process, another library), so each one takes this run's GL backend itself.
            gl = {k: os.environ[k] for k in ("MUJOCO_GL", "PYOPENGL_PLATFORM") if k in os.environ}
            make = functools.partial(_make_with_environ, gl, functools.partial(self.make_task_env, task))
            forkserver.socket_folder()
            return gym.vector.AsyncVectorEnv([make] * n_envs, context="forkserver")
        return gym.vector.SyncVectorEnv([functools.partial(self.make_task_env, task) for _ in range(n_envs)])

    def create_envs(self, n_envs: int, use_async_envs: bool = True) -> dict[str, dict[int, VectorEnv]]:
        """{task group: {task_id: vector env of n_envs}} for every task, as LeRobot's envs do.

        Async by default for n_envs > 1, sync for 1. rollbench's own lockstep path builds
        one task at a time through `make_vector_env` instead, so that a 50-task suite
        never holds 50 pools of processes at once.
        """
        return {
            group: {i: self.make_vector_env(task, n_envs, use_async_envs) for i, task in enumerate(names)}
            for group, names in self.tasks().items()
        }

    def replace(self, **changes: Any) -> BenchmarkConfig:
        return dataclasses.replace(self, **changes)


def _lookup(obs: Mapping[str, Any], key: str, flag: str) -> Any:
    """obs[key], also inside a nested `pixels` dict; a miss names the keys there are."""
    if key in obs:
        return obs[key]
    pixels = obs.get("pixels")
    if isinstance(pixels, Mapping) and key in pixels:
        return pixels[key]
    known = sorted([*obs, *(pixels if isinstance(pixels, Mapping) else [])])
    raise ConfigError(f"{flag}: the observation has no key {key!r}; it has: {', '.join(map(str, known))}")


def select_keys(obs: Mapping[str, Any], state_keys: tuple[str, ...], camera_keys: tuple[str, ...]) -> dict[str, Any]:
    """The key-selection processor: pick and rename observation keys (single or batched obs).

    State parts are flattened per env and concatenated in the order given; images keep
    their shape. Keys not named are dropped.
    """
    out: dict[str, Any] = {}
    if state_keys:
        parts = [np.asarray(_lookup(obs, k, "--env.state_keys")) for k in state_keys]
        batched = all(p.ndim >= 2 for p in parts) and len({p.shape[0] for p in parts}) == 1 and parts[0].ndim > 1
        lead = parts[0].shape[0] if batched else None
        flat = [p.reshape(lead, -1) if lead is not None else p.reshape(-1) for p in parts]
        out["observation.state"] = np.concatenate(flat, axis=-1)
    for spec in camera_keys:
        key, _, name = spec.partition(":")
        out[f"observation.images.{name or key}"] = _lookup(obs, key, "--env.camera_keys")
    return out


def split_tasks(spec: str) -> list[str]:
    return [part.strip() for part in spec.split(",") if part.strip()]
