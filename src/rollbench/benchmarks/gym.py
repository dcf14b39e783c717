"""Any registered gymnasium env: `--env.type=gym --env.task=CartPole-v1`.

An id with a namespace (`gym_pusht/PushT-v0`) or a `module:EnvId` prefix imports its
package on demand; a missing package fails with its name.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

import gymnasium as gym

from rollbench.config.env import BenchmarkConfig, register_benchmark, split_tasks
from rollbench.config.fields import opt
from rollbench.errors import BenchmarkUnavailable, ConfigError, did_you_mean


def _import_for(env_id: str, package: str | None) -> str:
    """Import what registers `env_id`; return the id without a `module:` prefix."""
    module = package
    given = env_id
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
    elif "/" in env_id and module is None:
        module = env_id.split("/", 1)[0]
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if package is None and ":" not in env_id and "/" in env_id and err.name == module:
                # a namespace need not be a module (e.g. ALE's envs): let the registry decide
                return env_id
            raise BenchmarkUnavailable(
                f"--env.task={given!r} needs the Python package {err.name!r}; install it with `pip install {err.name}`"
            ) from None
    return env_id


@register_benchmark("gym")
@dataclass(frozen=True)
class GymConfig(BenchmarkConfig):
    """Any registered gymnasium environment id."""

    task: str = opt("CartPole-v1", "gymnasium env id(s), comma separated; `module:EnvId` imports module first")
    package: str | None = opt(None, "module to import before making the env (if it registers the id)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not split_tasks(self.task):
            raise ConfigError("--env.task is empty; give a gymnasium env id, e.g. CartPole-v1")

    def tasks(self) -> dict[str, list[str]]:
        return {name: [name] for name in split_tasks(self.task)}

    def _spec(self, task: str) -> gym.envs.registration.EnvSpec:
        env_id = _import_for(task, self.package)
        try:
            return gym.spec(env_id)
        except gym.error.Error:
            hint = did_you_mean(env_id, gym.registry)
            namespace = env_id.split("/", 1)[0] if "/" in env_id else None
            if namespace and self.package is None and importlib.util.find_spec(namespace) is None:
                # the namespace usually names the package that registers the id (gym_pusht/PushT-v0)
                hint = (
                    f" Its namespace {namespace!r} is not an installed Python package; install the package "
                    f"that registers it (e.g. `pip install {namespace}`) or name it with --env.package.{hint}"
                )
            raise ConfigError(f"--env.task={task!r} is not a registered gymnasium env.{hint}") from None

    def validate_tasks(self) -> None:
        for task in split_tasks(self.task):
            self._spec(task)

    def make_task_env(self, task: str) -> gym.Env:
        spec = self._spec(task)
        return gym.make(spec, max_episode_steps=self.effective_max_steps(task))

    def max_episode_steps(self, task: str) -> int:
        steps = self._spec(task).max_episode_steps
        if steps is None:
            if self.episode_length is None:
                raise ConfigError(
                    f"--env.task={task!r} has no step limit of its own; set --env.episode_length"
                )
            return self.episode_length
        return int(steps)

    def package_versions(self) -> dict[str, str]:
        return {"gymnasium": gym.__version__}
