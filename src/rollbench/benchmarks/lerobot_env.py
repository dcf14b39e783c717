"""LeRobot's own envs in rollbench: `--env.type=lerobot --env.name=<a LeRobot env type>`.

The env config is LeRobot's: the class its `EnvConfig` registry holds under `--env.name`
(LeRobot's built-ins and the third-party `lerobot_env_*` packages, imported first, as
LeRobot 0.6 discovers them), parsed by LeRobot's own parser (draccus) from `--env.task`,
`--env.episode_length` and `--env.fields=key=value,...`. The envs come from LeRobot's
factory (`make_env`), and what a policy sees is what lerobot-eval gives it: LeRobot's
`preprocess_observation`, then the env's processors (`make_env_pre_post_processors`).

LeRobot's factory returns `{suite: {task_id: VectorEnv}}` for every task at once. rollbench
needs that structure in the driver and one fresh env per slot in its workers, so while the
factory runs, gymnasium's vector env classes are replaced by `RecordedVectorEnv`, which keeps
the env factories it is given and builds nothing (`vector_env_catalogue`). Each suite is a
task group; its task `<suite>/<task_id>` (or just `<suite>` when it is the suite's only
task, id 0) is built by calling LeRobot's own factory function of that task. `benchmarks/envhub.py` uses the same catalogue for LeRobot's EnvHub files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import io
import logging
import re
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import gymnasium as gym
import numpy as np

from rollbench.config.env import (
    ActionProcessor,
    BenchmarkConfig,
    Feature,
    ObsProcessor,
    identity,
    register_benchmark,
    select_keys,
    success_from_info,
)
from rollbench.config.fields import opt
from rollbench.errors import BenchmarkUnavailable, ConfigError, did_you_mean, error_line

log = logging.getLogger(__name__)

INSTALL_HINT = "see docs/lerobot.md (pip install --no-deps lerobot==0.4.4 -r constraints/lerobot.txt)"
#: distributions whose (normalised) name starts so are LeRobot env plugins (LeRobot 0.6's rule)
PLUGIN_PREFIX = "lerobot_env_"
#: fields LeRobot's env configs derive themselves; not settable through --env.fields
DERIVED_FIELDS = frozenset({"features", "features_map"})
#: fields given as rollbench's own flags, which also pass them to LeRobot's config
OWN_FLAGS = ("task", "episode_length")

EnvFactory = Callable[[], gym.Env]


# -- a factory's {suite: {task_id: VectorEnv}} as factories of single envs -------------------


class RecordedVectorEnv(gym.vector.VectorEnv):  # type: ignore[misc]
    """Stands in for gymnasium's Sync/AsyncVectorEnv while a factory runs: keeps the env
    factories it is given and builds none of them."""

    def __init__(self, env_fns: Any, *args: Any, **kwargs: Any) -> None:
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)


# One class per slot: LeRobot 0.6's factories test `env_cls is gym.vector.AsyncVectorEnv` and
# wrap the async one in a lazy vector env of their own; the bridge asks for sync envs, which
# must not look async.
class RecordedSyncVectorEnv(RecordedVectorEnv):
    pass


class RecordedAsyncVectorEnv(RecordedVectorEnv):
    pass


_RECORDING = threading.Lock()


@contextlib.contextmanager
def recording_vector_envs() -> Iterator[None]:
    """Within: `gym.vector.SyncVectorEnv(fns)` and `AsyncVectorEnv(fns)` record `fns` only.

    LeRobot's factory builds every task of a suite at once (a MetaWorld group is dozens of
    simulators, a LIBERO env renders when it is constructed), and looks the classes up on
    `gym.vector` when it runs; code that imported a class by name before still builds
    (`vector_env_catalogue` then takes that vector env's factories and closes it). The lock
    serialises catalogues; a process builds each one once, when its tasks are first listed,
    before any of its episodes runs.
    """
    vector = gym.vector
    with _RECORDING:
        saved = vector.SyncVectorEnv, vector.AsyncVectorEnv
        setattr(vector, "SyncVectorEnv", RecordedSyncVectorEnv)  # noqa: B010  (mypy: a class is not assignable)
        setattr(vector, "AsyncVectorEnv", RecordedAsyncVectorEnv)  # noqa: B010
        try:
            yield
        finally:
            setattr(vector, "SyncVectorEnv", saved[0])  # noqa: B010
            setattr(vector, "AsyncVectorEnv", saved[1])  # noqa: B010


class _LogLines(io.TextIOBase):
    """A stdout for LeRobot's `print`s: stdout is for rollbench's results."""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                log.debug("lerobot: %s", line)
        return len(text)


def quiet() -> contextlib.AbstractContextManager[Any]:
    return contextlib.redirect_stdout(_LogLines())


def _suite_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    return str(getattr(spec, "id", None) or "hub_env")  # LeRobot's name for an unnamed suite


def _factory_of(vec: Any, where: str) -> EnvFactory:
    if isinstance(vec, RecordedVectorEnv):
        return vec.env_fns[0]  # type: ignore[no-any-return]
    if not isinstance(vec, gym.vector.VectorEnv):
        raise ConfigError(f"{where} returned a {type(vec).__name__} where a gymnasium VectorEnv belongs")
    fns = getattr(vec, "env_fns", None)
    if not fns:
        raise ConfigError(
            f"{where} returned a {type(vec).__name__} without env_fns; rollbench builds one env per slot "
            f"from a vector env's factories (gymnasium's Sync/AsyncVectorEnv keep them)"
        )
    vec.close()
    return fns[0]  # type: ignore[no-any-return]


def _rebuild_single(make: Callable[[], Any], where: str) -> gym.Env:
    with quiet():
        env = make()
    if not isinstance(env, gym.Env):
        raise ConfigError(f"{where} returned a {type(env).__name__} once and a gymnasium.Env before")
    return env


def vector_env_catalogue(make: Callable[[], Any], where: str) -> dict[str, dict[int, EnvFactory]]:
    """{suite: {task_id: factory of one env}} from `make()`, which returns what LeRobot's
    factory and EnvHub files return: `{suite: {task_id: VectorEnv}}`, one VectorEnv (suite:
    its spec id) or one env. Each call of a factory builds a fresh env (a single env is
    made by calling `make()` again)."""
    with recording_vector_envs(), quiet():
        result = make()
    if isinstance(result, Mapping):
        out: dict[str, dict[int, EnvFactory]] = {}
        for suite, by_id in result.items():
            if not isinstance(by_id, Mapping) or not by_id:
                raise ConfigError(
                    f"{where} returned {{{suite!r}: {type(by_id).__name__}}}; expected {{suite: {{task_id: VectorEnv}}}}"
                )
            out[str(suite)] = {int(tid): _factory_of(vec, where) for tid, vec in by_id.items()}
        if not out:
            raise ConfigError(f"{where} returned no envs")
        return out
    if isinstance(result, gym.vector.VectorEnv):
        return {_suite_name(result): {0: _factory_of(result, where)}}
    if isinstance(result, gym.Env):
        suite = _suite_name(result)
        result.close()
        return {suite: {0: functools.partial(_rebuild_single, make, where)}}
    raise ConfigError(
        f"{where} returned a {type(result).__name__}; expected {{suite: {{task_id: VectorEnv}}}}, "
        f"a gymnasium VectorEnv or a gymnasium.Env"
    )


def task_names(catalogue: Mapping[str, Mapping[int, EnvFactory]]) -> dict[str, list[str]]:
    """rollbench's tasks of a catalogue: a suite of one task 0 is its own task (`pusht`),
    any other task is `<suite>/<task_id>` (`libero_10/3`), in the factory's order."""
    return {
        suite: [suite] if list(by_id) == [0] else [f"{suite}/{tid}" for tid in by_id]
        for suite, by_id in catalogue.items()
    }


def lookup(catalogue: Mapping[str, Mapping[int, EnvFactory]], task: str) -> EnvFactory | None:
    """The factory of a task named by `task_names`, or None."""
    if task in catalogue and list(catalogue[task]) == [0]:
        return catalogue[task][0]
    suite, _, tid = task.rpartition("/")
    try:
        return catalogue[suite][int(tid)]
    except (KeyError, ValueError):
        return None


# -- what rollbench reads from a built env ---------------------------------------------------


def _env_attr(env: Any, name: str) -> Any:
    """`env.<name>` as LeRobot's `add_envs_task` reads it (present on the outer env; the
    value through its wrappers, called if callable), or None."""
    if not hasattr(env, name):
        return None
    value = env.get_wrapper_attr(name) if hasattr(env, "get_wrapper_attr") else getattr(env, name)
    return value() if callable(value) else value


@dataclass(frozen=True)
class EnvFacts:
    """What rollbench needs of a task without stepping it, read from one built env."""

    max_steps: int | None  # `_max_episode_steps`: lerobot-eval's step limit
    description: str  # `task_description`, else `task`, else "" (LeRobot's add_envs_task)
    observation_space: Any
    action_space: Any

    @classmethod
    def of(cls, env: gym.Env) -> EnvFacts:
        try:
            steps = env.get_wrapper_attr("_max_episode_steps")
        except AttributeError:
            steps = None
        desc = _env_attr(env, "task_description")
        if desc is None:
            desc = _env_attr(env, "task")
        return cls(int(steps) if steps is not None else None, str(desc or ""), env.observation_space, env.action_space)


_FACTS: dict[tuple[Hashable, str], EnvFacts] = {}


def task_facts(owner: Hashable, task: str, build: EnvFactory) -> EnvFacts:
    """The facts of `task`, from an env this process built already or from one built and closed now."""
    key = (owner, task)
    if key not in _FACTS:
        with quiet():
            env = build()
        try:
            _FACTS[key] = EnvFacts.of(env)
        finally:
            env.close()
    return _FACTS[key]


def remember_facts(owner: Hashable, task: str, env: gym.Env) -> None:
    _FACTS.setdefault((owner, task), EnvFacts.of(env))


def _one_row(sample: Any) -> Any:
    """A sampled observation as a batch of one (dicts key by key)."""
    if isinstance(sample, Mapping):
        return {k: _one_row(v) for k, v in sample.items()}
    return np.asarray(sample)[None]


def features_of(bench: BenchmarkConfig, facts: EnvFacts) -> dict[str, Feature]:
    """LeRobot-keyed features of what a policy sees: a sample of the observation space
    through the benchmark's own path (to_features, then its preprocessor)."""
    pre, _ = bench.get_env_processors()
    batch = pre(bench.to_features(_one_row(facts.observation_space.sample())))
    out: dict[str, Feature] = {}
    for key, value in batch.items():
        if not isinstance(value, np.ndarray) or value.ndim < 2:
            continue
        row = value[0]
        kind = "VISUAL" if row.ndim == 3 else ("ENV" if "environment_state" in key else "STATE")
        out[key] = Feature(kind, tuple(row.shape))
    if getattr(facts.action_space, "shape", None):
        out["action"] = Feature("ACTION", tuple(facts.action_space.shape))
    return out


# -- LeRobot's registry, plugins and config ---------------------------------------------------


def _add_config_exports() -> None:
    """LeRobot 0.5+ exports its feature types from `lerobot.configs`; in 0.4.4 that is a
    namespace package without them, so a plugin written for 0.6 (lerobot-env-so101 does
    `from lerobot.configs import FeatureType, PolicyFeature`) fails on import. Add the
    names `lerobot.configs.types` defines where they are missing; nothing that imports
    today changes."""
    import lerobot.configs as configs  # optional: lerobot
    from lerobot.configs import types  # optional: lerobot

    for name in ("FeatureType", "NormalizationMode", "PipelineFeatureType", "PolicyFeature"):
        if not hasattr(configs, name) and hasattr(types, name):
            setattr(configs, name, getattr(types, name))


@functools.cache
def discover_plugins() -> dict[str, str]:
    """Import every installed `lerobot_env_*` distribution, as LeRobot 0.6's
    `register_third_party_plugins` does (0.4.4's does not look for envs); their
    `@EnvConfig.register_subclass` runs on import. Returns {module: why} for those that failed."""
    _add_config_exports()
    failed: dict[str, str] = {}
    seen: set[str] = set()
    for dist in metadata.distributions():
        module = str(dist.metadata["Name"] or "").replace("-", "_")
        if not module.startswith(PLUGIN_PREFIX) or module in seen:
            continue
        seen.add(module)
        try:
            with quiet():
                importlib.import_module(module)
        except Exception as err:  # a broken plugin must not hide the others
            failed[module] = f"{type(err).__name__}: {err}"
            log.warning("LeRobot env plugin %s failed to import (%s)", module, failed[module])
    return failed


def registered_envs() -> list[str]:
    """Every env type LeRobot's registry knows once the plugins are imported."""
    from lerobot.envs.configs import EnvConfig  # optional: lerobot

    discover_plugins()
    return sorted(EnvConfig.get_known_choices())


def env_config_class(name: str) -> type[Any]:
    from lerobot.envs.configs import EnvConfig  # optional: lerobot

    known = registered_envs()
    if not name:
        raise ConfigError(f"--env.name is required for --env.type=lerobot; registered LeRobot envs: {', '.join(known)}")
    if name not in known:
        failed = discover_plugins()
        why = f" Plugins that failed to import: {'; '.join(f'{m} ({e})' for m, e in failed.items())}." if failed else ""
        raise ConfigError(
            f"--env.name={name!r} is not a registered LeRobot env.{did_you_mean(name, known)} Registered: "
            f"{', '.join(known)}. A plugin env comes with its package: `pip install lerobot-env-{name.replace('_', '-')}` "
            f"(or its own name), imported as lerobot_env_*.{why}"
        )
    return EnvConfig.get_choice_class(name)  # type: ignore[no-any-return]


_FIELD_START = re.compile(r",\s*(?=[A-Za-z_][\w.]*\s*=)")


def parse_fields(spec: str) -> list[tuple[str, str]]:
    """`key=value,key=value` -> pairs; a comma starts a new pair only before `name=`, so
    values keep their commas (`camera_name=a,b`, `task_ids=[0,3]`)."""
    pairs: list[tuple[str, str]] = []
    for part in _FIELD_START.split(spec.strip()) if spec.strip() else []:
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"--env.fields={spec!r}: {part!r} is not key=value; give LeRobot env config fields as key=value,key=value")
        if key in (k for k, _ in pairs):
            raise ConfigError(f"--env.fields={spec!r}: {key!r} is given twice")
        pairs.append((key, value.strip()))
    return pairs


def settable_fields(cls: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init and f.name not in DERIVED_FIELDS]


@functools.lru_cache(maxsize=16)
def lerobot_config(bench: LerobotEnvConfig) -> Any:
    """LeRobot's env config object, parsed by LeRobot's parser as lerobot-eval parses
    `--env.<key>=<value>`; unknown fields are refused naming the flag and the fields there are."""
    import draccus  # optional: comes with lerobot
    from lerobot.envs.configs import HubEnvConfig  # optional: lerobot

    cls = env_config_class(bench.name)
    allowed = settable_fields(cls)
    args = []
    for key, value in parse_fields(bench.fields):
        if key in OWN_FLAGS:
            raise ConfigError(f"--env.fields: give {key!r} as --env.{key}={value} (rollbench's flag, passed to LeRobot's config)")
        if key.split(".")[0] not in allowed:
            hint = did_you_mean(key, allowed)
            raise ConfigError(
                f"--env.fields: {key}={value} is not a field of LeRobot's {bench.name!r} env config ({cls.__name__}).{hint} "
                f"Its fields: {', '.join(f for f in allowed if f not in OWN_FLAGS)}"
            )
        args.append(f"--{key}={value}")
    if bench.task:
        args.append(f"--task={bench.task}")
    if bench.episode_length is not None and "episode_length" in allowed:
        args.append(f"--episode_length={bench.episode_length}")
    try:
        with contextlib.redirect_stderr(io.StringIO()) as err, quiet():
            cfg = draccus.parse(config_class=cls, args=args)
    except (Exception, SystemExit) as exc:  # draccus exits on some errors; __post_init__ raises others
        said = err.getvalue().strip().splitlines() if isinstance(exc, SystemExit) else [_with_cause(exc)]
        raise ConfigError(
            f"--env.name={bench.name}: LeRobot's {cls.__name__} refuses {bench.given_flags() or 'its defaults'} "
            f"({(said or ['draccus exited'])[-1].strip()})"
        ) from None
    if isinstance(cfg, HubEnvConfig):
        raise ConfigError(
            f"--env.name={bench.name} is a LeRobot hub env: its code comes from the hub repository {cfg.hub_path!r}; "
            f"rollbench downloads nothing: download it and run its file with --env.type=hub --env.hub_path=<its env.py>"
        )
    return cfg


def _with_cause(err: BaseException) -> str:
    """`Type: message`, and the innermost cause's when there is one (draccus wraps the
    config's own ValueError in "Couldn't instantiate class ...")."""
    inner = err
    while inner.__cause__ is not None:
        inner = inner.__cause__
    text = error_line(err)
    return text if inner is err else f"{text}; {error_line(inner)}"


def _missing_package(err: BaseException) -> str | None:
    for e in (err, err.__cause__):
        if isinstance(e, ModuleNotFoundError) and e.name:
            return e.name
    return None


@functools.lru_cache(maxsize=16)
def lerobot_catalogue(bench: LerobotEnvConfig) -> dict[str, dict[int, EnvFactory]]:
    """{suite: {task_id: factory}} of LeRobot's factory for `bench`, no env built."""
    from lerobot.envs.configs import LiberoEnv  # optional: lerobot
    from lerobot.envs.factory import make_env  # optional: lerobot

    cfg = lerobot_config(bench)
    where = f"LeRobot's make_env for --env.name={bench.name}"
    libero_from = metadata.packages_distributions().get("libero", [])
    if bench.name == "libero_plus" and any(d.replace("-", "_") == "hf_libero" for d in libero_from):
        # LeRobot's libero_plus imports the `libero` package: hf-libero's is LIBERO, whose results
        # would be reported under LIBERO-plus's name
        raise BenchmarkUnavailable(
            "--env.name=libero_plus: the installed `libero` package is hf-libero's LIBERO, not LIBERO-plus (a git fork "
            "that installs under the same name), so it would run plain LIBERO under libero_plus's name; install "
            "LIBERO-plus in its place, or run --env.type=libero (docs/lerobot_envs.md)"
        )
    # libero and its subclasses (0.6's libero_plus): the `libero` package asks on stdin for its
    # config on import, so give it rollbench's first
    if isinstance(cfg, LiberoEnv):
        # lazy: a plugin, loaded by name (registry.py); only LIBERO needs it
        from rollbench.benchmarks.libero import LiberoConfig, prepare_libero

        prepare_libero(LiberoConfig().assets())
    try:
        return vector_env_catalogue(lambda: make_env(cfg, n_envs=1, use_async_envs=False), where)
    except ConfigError:
        raise
    except Exception as err:
        missing = _missing_package(err)
        if missing:
            raise BenchmarkUnavailable(
                f"--env.name={bench.name}: LeRobot's env needs the Python package {missing!r}; "
                f"install it with `pip install {missing.replace('_', '-')}`"
            ) from None
        raise ConfigError(f"{where} failed ({error_line(err)})") from None


# -- LeRobot's observation path in numpy ------------------------------------------------------


def _is_image_key(key: str) -> bool:
    return key == "observation.image" or key.startswith("observation.images.")


def to_numpy(batch: Mapping[str, Any]) -> dict[str, Any]:
    """LeRobot's torch batch -> rollbench's numpy one: images float CHW in [0, 1] back to
    uint8 HWC (exact: round(x / 255 * 255) == x in float32), other tensors as arrays. The
    LeRobot adapter turns them into the same tensors again (`policies/lerobot.to_policy_batch`)."""
    import torch  # heavy, optional: torch (comes with lerobot)

    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, Mapping):
            out[key] = to_numpy(value)
        elif isinstance(value, torch.Tensor):
            if _is_image_key(key) and value.ndim == 4 and value.is_floating_point():
                value = (value * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
            out[key] = value.detach().cpu().numpy()
        else:
            out[key] = value
    return out


def to_torch(batch: Mapping[str, Any]) -> dict[str, Any]:
    """rollbench's numpy batch -> LeRobot's, as `preprocess_observation` leaves it (uint8 HWC
    images -> float32 CHW / 255), for LeRobot's env processors."""
    import torch  # heavy, optional: torch (comes with lerobot)

    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, Mapping):
            out[key] = to_torch(value)
        elif isinstance(value, np.ndarray) and value.dtype != object:
            t = torch.from_numpy(np.ascontiguousarray(value))
            if _is_image_key(key) and t.ndim == 4 and t.dtype == torch.uint8:
                t = t.permute(0, 3, 1, 2).contiguous().type(torch.float32) / 255
            out[key] = t
        else:
            out[key] = value
    return out


def _run_obs_pipeline(pipeline: Any, batch: dict[str, Any]) -> dict[str, Any]:
    import torch  # heavy, optional: torch (comes with lerobot)

    with torch.inference_mode():
        out = pipeline(to_torch(batch))
    # the pipeline returns a whole transition (action, next.reward, info, ...): keep the observation
    return to_numpy({k: v for k, v in out.items() if k.startswith("observation.") or k in batch})


def _run_action_pipeline(pipeline: Any, actions: np.ndarray) -> np.ndarray:
    import torch  # heavy, optional: torch (comes with lerobot)

    with torch.inference_mode():
        out = pipeline({"action": torch.from_numpy(np.ascontiguousarray(actions))})["action"]
    return np.asarray(out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else out)


class InitStateOfEpisode(gym.Wrapper):  # type: ignore[misc]
    """LeRobot's LIBERO env starts a reset from init state `init_state_id`, then moves it on by
    its vector env's size: in lerobot-eval, a task's episode k starts from init state k. A
    rollbench slot's env runs whichever episodes it is given, so the episode's index is put
    there before each reset (`set_episode_index`), as rollbench's own LIBERO does; an env reset
    without one keeps LeRobot's order."""

    episode_index: int | None = None

    def reset(self, **kwargs: Any) -> Any:
        if self.episode_index is not None:
            setattr(self.env.unwrapped, "init_state_id", int(self.episode_index))  # noqa: B010
        return self.env.reset(**kwargs)


class SeededGoals(gym.Wrapper):  # type: ignore[misc]
    """LeRobot's MetaWorld env leaves its goal positions to the global `np.random`, so its
    episodes are not functions of their seeds (nor lerobot-eval's repeatable). A reset with a
    seed first seeds the MetaWorld env's goal draws from it (`seed`, `seeded_rand_vec`), as
    rollbench's own MetaWorld does: an episode is then a function of its seed, and equal to
    `--env.type=metaworld`'s at the same image settings."""

    def reset(self, **kwargs: Any) -> Any:
        seed = kwargs.get("seed")
        if seed is not None:
            inner = getattr(self.env.unwrapped, "_env")  # noqa: B009
            inner.seed(int(seed))
            inner.seeded_rand_vec = True
        return self.env.reset(**kwargs)


# -- the benchmark ----------------------------------------------------------------------------


@register_benchmark("lerobot")
@dataclass(frozen=True)
class LerobotEnvConfig(BenchmarkConfig):
    """An env of LeRobot's registry (its own and lerobot_env_* plugins), built by LeRobot's factory."""

    #: LIBERO's init state follows the episode's index (`InitStateOfEpisode`); other envs ignore it
    uses_episode_index = True

    name: str = opt("", "the LeRobot env type (lerobot-eval's --env.type): pusht, aloha, libero, metaworld, a plugin's")
    task: str = opt("", "LeRobot's --env.task (default: the env config's own)")
    fields: str = opt(
        "", "other fields of LeRobot's env config, key=value comma separated, as lerobot-eval's --env.<key>=<value> "
        "(e.g. obs_type=environment_state_agent_pos,visualization_width=96)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_fields(self.fields)  # the syntax; the names need LeRobot's registry (validate_tasks)

    def check_available(self) -> None:
        if importlib.util.find_spec("lerobot") is None:
            raise BenchmarkUnavailable(f"--env.type=lerobot needs lerobot; {INSTALL_HINT}")

    def package_versions(self) -> dict[str, str]:
        out = {"gymnasium": gym.__version__}
        names = {"lerobot"}
        if self.name:
            top = env_config_class(self.name).__module__.split(".")[0]
            names |= set(metadata.packages_distributions().get(top, []))
        for dist in sorted(names):
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                out[dist] = "not installed"
        return out

    def given_flags(self) -> str:
        """The flags that reach LeRobot's config, as given, for error messages."""
        return " ".join(f"--env.{k}={getattr(self, k)}" for k in ("task", "episode_length", "fields") if getattr(self, k) not in ("", None))

    @property
    def lerobot(self) -> Any:
        """LeRobot's env config object for these flags."""
        return lerobot_config(self)

    @property
    def fps(self) -> int:  # type: ignore[override]
        return int(getattr(self.lerobot, "fps", 30))

    def validate_tasks(self) -> None:
        self.tasks()

    def tasks(self) -> dict[str, list[str]]:
        return task_names(lerobot_catalogue(self))

    def list_groups(self) -> dict[str, list[str]]:
        if not self.name:  # `rollbench list`: what --env.name may be
            return {"--env.name": registered_envs()}
        return self.tasks()

    def _factory(self, task: str) -> EnvFactory:
        factory = lookup(lerobot_catalogue(self), task)
        if factory is None:
            known = [t for names in self.tasks().values() for t in names]
            raise ConfigError(f"{task!r} is not a task of LeRobot's {self.name!r} env; its tasks: {', '.join(known)}")
        return factory

    def _build(self, task: str) -> gym.Env:
        factory = self._factory(task)
        try:
            with quiet():
                return factory()
        except Exception as err:  # LeRobot's configs check few values: a bad one fails here
            flags = self.given_flags()
            raise ConfigError(
                f"--env.name={self.name}: LeRobot cannot build task {task}{' with ' + flags if flags else ''} "
                f"({error_line(err)})"
            ) from err

    def make_task_env(self, task: str) -> gym.Env:
        env = self._build(task)
        remember_facts(self, task, env)
        if hasattr(env.unwrapped, "init_state_id"):
            env = InitStateOfEpisode(env)
        if hasattr(getattr(env.unwrapped, "_env", None), "seeded_rand_vec"):
            env = SeededGoals(env)
        return env

    def _facts(self, task: str) -> EnvFacts:
        return task_facts(self, task, functools.partial(self._build, task))

    def max_episode_steps(self, task: str) -> int:
        steps = self._facts(task).max_steps
        if steps is None:
            raise ConfigError(f"LeRobot's {self.name!r} env sets no _max_episode_steps for {task}; pass --env.episode_length")
        return steps

    def task_description(self, task: str) -> str:
        return self._facts(task).description

    @property
    def features(self) -> dict[str, Feature]:
        first = next(t for names in self.tasks().values() for t in names)
        return features_of(self, self._facts(first))

    def to_features(self, obs: Any) -> dict[str, Any]:
        """LeRobot's `preprocess_observation` (its keys, float32 states), back in numpy."""
        if self.state_keys or self.camera_keys:
            return select_keys(obs, self.state_keys, self.camera_keys)
        if not isinstance(obs, Mapping):
            return super().to_features(obs)
        from lerobot.envs.utils import preprocess_observation  # optional: lerobot

        return to_numpy(preprocess_observation(dict(obs)))

    def get_env_processors(self) -> tuple[ObsProcessor, ActionProcessor]:
        """LeRobot's processors of this env (identity for most; LIBERO's turns its robot
        state into `observation.state` and flips its images), in numpy at the seam."""
        from lerobot.envs.factory import make_env_pre_post_processors  # optional: lerobot

        pre_pipe, post_pipe = make_env_pre_post_processors(env_cfg=self.lerobot, policy_cfg=None)
        pre: ObsProcessor = identity if not pre_pipe.steps else functools.partial(_run_obs_pipeline, pre_pipe)
        post: ActionProcessor = identity if not post_pipe.steps else functools.partial(_run_action_pipeline, post_pipe)
        return pre, post

    def success(self, info: Mapping[str, Any]) -> bool:
        """`is_success` as lerobot-eval reads it, or `succeed` (gym-hil's key, which SO-101's
        plugin reports and lerobot-eval does not read)."""
        found = success_from_info(info)
        if found is not None:
            return found
        final = info.get("final_info")
        if isinstance(final, Mapping) and "succeed" in final:
            return bool(np.asarray(final["succeed"]).any())
        return bool(np.asarray(info.get("succeed", False)).any())
