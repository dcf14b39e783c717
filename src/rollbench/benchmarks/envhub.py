"""A benchmark defined outside rollbench: `--env.type=hub --env.hub_path=PATH`.

PATH is a Python file, or a package directory (its `__init__.py`, or `env.py` inside it),
that exposes `make_env` in one of two forms, told apart by its signature:

rollbench's own, one env of one task:

    make_env(task: str) -> gymnasium.Env      required; cheap (build the simulator on reset)
    TASKS: list[str]                           optional (default ["default"])
    MAX_EPISODE_STEPS: int | dict[str, int]    optional (else --env.episode_length)
    task_description(task) -> str              optional

LeRobot's EnvHub file (a parameter named `n_envs`), every task at once:

    make_env(n_envs, use_async_envs[, cfg]) -> {suite: {task_id: VectorEnv}} | VectorEnv | gymnasium.Env

called as LeRobot calls it (`cfg`, when declared, is this config: `cfg.task`,
`cfg.episode_length`, `cfg.hub_path`). Its suites are the task groups and task
`<suite>/<task_id>` (`<suite>` for a suite of one task 0) is one env built by that task's own env factory
(`lerobot_env.vector_env_catalogue`: listing the tasks builds no simulator). The step
limit is `MAX_EPISODE_STEPS`, else the env's `_max_episode_steps` (lerobot-eval's), else
--env.episode_length; the description `task_description(task)`, else the env's
`task_description` or `task` attribute (LeRobot's rule), else "".

Importing it runs its code, so it loads only with `--trust_remote_code=true`. PATH may also
be a hub repository, written as LeRobot writes it: `ORG/NAME[@REVISION][:FILE]` (FILE
default `env.py`). The driver downloads the repository once (`rollbench.hub`, the same
resolver as checkpoints) and pins PATH to `ORG/NAME@<commit>:FILE` (`resolve`), so the
workers, shard processes and a resume find that commit in the cache with no request, and a
moved branch shows as a different run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym

from rollbench import hub
from rollbench.benchmarks.lerobot_env import (
    EnvFactory,
    EnvFacts,
    lookup,
    quiet,
    remember_facts,
    task_facts,
    task_names,
    vector_env_catalogue,
)
from rollbench.config.env import BenchmarkConfig, register_benchmark, split_tasks
from rollbench.config.fields import opt
from rollbench.errors import ConfigError


def _entry_file(path: Path) -> Path:
    if path.is_file():
        return path
    for name in ("__init__.py", "env.py"):
        if (path / name).is_file():
            return path / name
    raise ConfigError(f"--env.hub_path={str(path)!r} is a directory without __init__.py or env.py")


def parse_hub_uri(hub_path: str) -> tuple[str, str | None, str] | None:
    """`ORG/NAME[@REVISION][:FILE]` -> (repo id, revision, file), as LeRobot's EnvHub reads it;
    None for a local path (one that exists, or that is not written that way)."""
    if Path(hub_path).expanduser().exists():
        return None
    repo, _, file = hub_path.partition(":")
    repo_id, _, revision = repo.partition("@")
    if not hub.is_hub_id(repo_id):
        return None
    return repo_id, revision or None, file or "env.py"


def hub_file(hub_path: str) -> tuple[Path, str] | None:
    """(the cached file, its commit) of a hub EnvHub path, downloaded when missing; None for
    a local path."""
    parsed = parse_hub_uri(hub_path)
    if parsed is None:
        return None
    repo_id, revision, file = parsed
    what = f"an EnvHub repository holds the file that defines make_env (give it as {repo_id}[@REVISION]:FILE)"
    folder, commit = hub.resolve(repo_id, revision, f"--env.hub_path={hub_path}", [file], what)
    return folder / file, commit


@functools.cache
def load_module(hub_path: str) -> ModuleType:
    """Import the user's module once per process (workers import it again, by path)."""
    found = hub_file(hub_path)
    path = found[0] if found is not None else Path(hub_path).expanduser()
    if not path.exists():
        raise ConfigError(f"--env.hub_path={hub_path!r} does not exist (a file, a package directory, or a hub "
                          f"repository ORG/NAME[@REVISION][:FILE])")
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
        raise ConfigError(
            f"--env.hub_path={hub_path!r}: {entry} defines no make_env(task) (nor LeRobot's make_env(n_envs, use_async_envs))"
        )
    return module


def is_envhub(module: ModuleType) -> bool:
    """Does the module's make_env follow LeRobot's EnvHub form (`make_env(n_envs, use_async_envs[, cfg])`)?"""
    try:
        return "n_envs" in inspect.signature(module.make_env).parameters
    except (TypeError, ValueError):  # no signature to read: rollbench's own form
        return False


@functools.lru_cache(maxsize=16)
def envhub_catalogue(bench: HubConfig) -> dict[str, dict[int, EnvFactory]]:
    """{suite: {task_id: factory}} of an EnvHub file's make_env, no env built."""
    make_env = bench.module.make_env
    kwargs = {"cfg": bench} if "cfg" in inspect.signature(make_env).parameters else {}
    where = f"{bench.hub_path}: make_env(n_envs=1, use_async_envs=False{', cfg=...' if kwargs else ''})"

    def call() -> object:
        try:
            return make_env(n_envs=1, use_async_envs=False, **kwargs)
        except Exception as err:
            raise ConfigError(f"{where} raised {type(err).__name__}: {err}") from None

    return vector_env_catalogue(call, where)


@register_benchmark("hub")
@dataclass(frozen=True)
class HubConfig(BenchmarkConfig):
    """A benchmark from a local Python file or package exposing make_env (needs --trust_remote_code)."""

    runs_user_code = True

    hub_path: str = opt("", "Python file or package directory exposing make_env(task) or LeRobot's EnvHub make_env(n_envs, ...)")
    task: str = opt("", "task(s) to run, comma separated (default: the module's TASKS, or every suite of an EnvHub file)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.hub_path:
            raise ConfigError("--env.hub_path is required for --env.type=hub")

    @property
    def module(self) -> ModuleType:
        return load_module(self.hub_path)

    def resolve(self) -> HubConfig:
        """A hub repository pinned to the commit its revision names now (downloaded once)."""
        parsed = parse_hub_uri(self.hub_path)
        if parsed is None or hub.is_commit(parsed[1]):
            return self
        repo_id, _, file = parsed
        found = hub_file(self.hub_path)
        assert found is not None
        return dataclasses.replace(self, hub_path=f"{repo_id}@{found[1]}:{file}")

    @property
    def envhub(self) -> bool:
        return is_envhub(self.module)

    def _select(self, known: list[str], groups: dict[str, list[str]] | None = None) -> list[str]:
        """The --env.task names among `known` (tasks, or with `groups` also group names)."""
        wanted = split_tasks(self.task)
        if not wanted:
            return known
        names = [*(groups or {}), *known]
        for t in wanted:
            if t not in names:
                raise ConfigError(f"--env.task={t!r} is not a task of {self.hub_path}; its tasks: {', '.join(names)}")
        return wanted

    def tasks(self) -> dict[str, list[str]]:
        if self.envhub:
            groups = task_names(envhub_catalogue(self))
            wanted = set(self._select([t for names in groups.values() for t in names], groups))
            out = {g: [t for t in names if g in wanted or t in wanted] for g, names in groups.items()}
            return {g: names for g, names in out.items() if names}
        known = [str(t) for t in getattr(self.module, "TASKS", ["default"])]
        return {t: [t] for t in self._select(known)}

    def _factory(self, task: str) -> EnvFactory:
        factory = lookup(envhub_catalogue(self), task)
        if factory is None:
            raise ConfigError(f"{task!r} is not a task of {self.hub_path}")
        return factory

    def make_task_env(self, task: str) -> gym.Env:
        if self.envhub:
            factory = self._factory(task)
            with quiet():
                env = factory()
            if not isinstance(env, gym.Env):
                raise ConfigError(f"{self.hub_path}: the env factory of {task!r} returned {type(env).__name__}, not a gymnasium.Env")
            remember_facts(self, task, env)
            return env
        env = self.module.make_env(task)
        if not isinstance(env, gym.Env):
            raise ConfigError(f"{self.hub_path}: make_env({task!r}) returned {type(env).__name__}, not a gymnasium.Env")
        return env

    def _facts(self, task: str) -> EnvFacts | None:
        return task_facts(self, task, functools.partial(self.make_task_env, task)) if self.envhub else None

    def max_episode_steps(self, task: str) -> int:
        steps: Any = getattr(self.module, "MAX_EPISODE_STEPS", None)
        if isinstance(steps, dict):
            steps = steps.get(task)
        if steps is None and (facts := self._facts(task)) is not None:
            steps = facts.max_steps
        if steps is None:
            if self.episode_length is None:
                raise ConfigError(f"{self.hub_path} sets no MAX_EPISODE_STEPS for {task!r}; pass --env.episode_length")
            return self.episode_length
        return int(steps)

    def task_description(self, task: str) -> str:
        describe = getattr(self.module, "task_description", None)
        if callable(describe):
            return str(describe(task))
        facts = self._facts(task)
        return facts.description if facts is not None else task
