"""A benchmark defined outside rollbench: `--env.type=hub --env.hub_path=PATH`.

PATH is a Python file, or a package directory (its `__init__.py`, or `env.py` inside it),
that exposes:

    make_env(task: str) -> gymnasium.Env      required; cheap (build the simulator on reset)
    TASKS: list[str]                           optional (default ["default"])
    MAX_EPISODE_STEPS: int | dict[str, int]    optional (else --env.episode_length)
    task_description(task) -> str              optional

Importing it runs its code, so it loads only with `--trust_remote_code=true`. Hub
repository ids need the network to download; download the repository and give its
local directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym

from rollbench.config.env import BenchmarkConfig, register_benchmark, split_tasks
from rollbench.config.fields import opt
from rollbench.errors import ConfigError

_loaded: dict[str, ModuleType] = {}


def _entry_file(path: Path) -> Path:
    if path.is_file():
        return path
    for name in ("__init__.py", "env.py"):
        if (path / name).is_file():
            return path / name
    raise ConfigError(f"--env.hub_path={str(path)!r} is a directory without __init__.py or env.py")


def load_module(hub_path: str) -> ModuleType:
    """Import the user's module once per process (workers import it again, by path)."""
    if hub_path in _loaded:
        return _loaded[hub_path]
    path = Path(hub_path).expanduser()
    if not path.exists():
        hint = " (hub repository ids need the network: download the repo and pass its directory)" if "/" in hub_path and not hub_path.startswith((".", "/", "~")) else ""
        raise ConfigError(f"--env.hub_path={hub_path!r} does not exist{hint}")
    entry = _entry_file(path)
    name = f"rollbench_hub_{hashlib.sha1(str(entry.resolve()).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(
        name, entry, submodule_search_locations=[str(entry.parent)] if entry.name == "__init__.py" else None
    )
    if spec is None or spec.loader is None:
        raise ConfigError(f"--env.hub_path={hub_path!r}: cannot import {entry}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise ConfigError(f"--env.hub_path={hub_path!r}: importing {entry} failed ({type(err).__name__}: {err})") from None
    if not callable(getattr(module, "make_env", None)):
        raise ConfigError(f"--env.hub_path={hub_path!r}: {entry} defines no make_env(task)")
    _loaded[hub_path] = module
    return module


@register_benchmark("hub")
@dataclass(frozen=True)
class HubConfig(BenchmarkConfig):
    """A benchmark from a local Python file or package exposing make_env (needs --trust_remote_code)."""

    runs_user_code = True

    hub_path: str = opt("", "Python file or package directory exposing make_env(task)")
    task: str = opt("", "task(s) to run, comma separated (default: the module's TASKS)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.hub_path:
            raise ConfigError("--env.hub_path is required for --env.type=hub")

    @property
    def module(self) -> ModuleType:
        return load_module(self.hub_path)

    def tasks(self) -> dict[str, list[str]]:
        known = [str(t) for t in getattr(self.module, "TASKS", ["default"])]
        wanted = split_tasks(self.task) or known
        for t in wanted:
            if t not in known:
                raise ConfigError(f"--env.task={t!r} is not a task of {self.hub_path}; its TASKS: {', '.join(known)}")
        return {t: [t] for t in wanted}

    def make_task_env(self, task: str) -> gym.Env:
        env = self.module.make_env(task)
        if not isinstance(env, gym.Env):
            raise ConfigError(f"{self.hub_path}: make_env({task!r}) returned {type(env).__name__}, not a gymnasium.Env")
        return env

    def max_episode_steps(self, task: str) -> int:
        steps: Any = getattr(self.module, "MAX_EPISODE_STEPS", None)
        if isinstance(steps, dict):
            steps = steps.get(task)
        if steps is None:
            if self.episode_length is None:
                raise ConfigError(f"{self.hub_path} sets no MAX_EPISODE_STEPS for {task!r}; pass --env.episode_length")
            return self.episode_length
        return int(steps)

    def task_description(self, task: str) -> str:
        describe = getattr(self.module, "task_description", None)
        return str(describe(task)) if callable(describe) else task
