"""The policy protocol at rollbench's seam, in numpy.

    reset(slots, episodes)              # new episodes start in these slots
    act(batch, slots) -> actions        # batch: dict of arrays, leading dim = len(slots)

A *slot* is a stable integer naming one running episode's place; state that belongs to an
episode (an RNG, an action queue, a scripted expert's phase) is kept per slot by the
adapter. `reset` tells the policy which episode (task, seed, description) now occupies
each slot. `batch` holds LeRobot keys (`observation.state`, `observation.image`, ...)
plus `task`: each row's task string as lerobot-eval gives it (`BenchmarkConfig.policy_task`:
the language instruction, or "" where lerobot-eval's env has none), as a list of strings.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rollbench.config.env import BenchmarkConfig
from rollbench.config.policy import POLICIES, PolicyConfig
from rollbench.errors import ConfigError, PolicyError


@dataclass(frozen=True)
class EpisodeStart:
    """What a policy learns about the episode starting in a slot."""

    task_group: str
    task: str
    #: the task in words, never empty; `act`'s batch["task"] is lerobot-eval's prompt instead,
    #: "" where the env gives none (PushT, ALOHA): docs/adding_a_policy.md
    description: str
    episode_index: int
    seed: int
    #: --eval.perturb: the condition the episode runs under ("" for the control), which
    #: rollbench applies itself; a policy has no need of it
    condition: str = ""


@dataclass(frozen=True)
class PolicyContext:
    """What an adapter may know of the benchmark when it is built."""

    config: PolicyConfig
    benchmark: BenchmarkConfig
    action_space: Any  # gymnasium space of one env
    seed: int | None = None  # the run's --seed (None: built outside a run, e.g. by rollbench serve)


class Policy(abc.ABC):
    """Base class of the adapters: every policy type builds a subclass (`make_policy` refuses
    anything else in one line), so the schedulers may call each hook below."""

    #: the adapter keeps all episode state per slot, so slots may restart independently
    per_slot_state: ClassVar[bool] = True
    #: cheap on a CPU: may run inside each env worker (`--policy.placement=auto`)
    cheap: ClassVar[bool] = False
    #: a dataclass of this type's own `--policy.<field>` flags (fields declared with `opt`):
    #: `rollbench eval --help` lists them under `--policy.type=<name>`, an unknown one is refused
    #: by name when the flags are read, and the adapter builds it from `ctx.config.options`
    #: (`rollbench.config.fields.build`), which checks the values
    options_class: ClassVar[type | None] = None
    #: takes `--policy.<field>` flags that no dataclass lists and checks them itself (LeRobot:
    #: any field of the checkpoint's config); neither this nor `options_class`: none are taken
    accepts_options: ClassVar[bool] = False
    #: with `accepts_options`: what `rollbench eval --help` says those flags are
    options_help: ClassVar[str] = ""
    #: env steps served per network call (a chunking policy's n_action_steps); `rollbench
    #: tune` amortises the cost of a call over them
    steps_per_inference: int = 1

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:  # noqa: B027
        """New episodes start in `slots`."""

    @abc.abstractmethod
    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        """One action per row of `batch`."""

    def torch_modules(self) -> Sequence[Any]:
        """The torch modules whose parameters `act` uses (none by default): rollbench watches
        them to refuse a policy that changes its own weights while it acts, which would make
        each episode depend on those before it (`policies/weights.py`)."""
        return ()

    def env_processors(self, benchmark: BenchmarkConfig) -> tuple[Any, Any] | None:
        """(observation pre-processor, action post-processor) to use in place of the
        benchmark's (`get_env_processors`), or None for the benchmark's. A policy that brings
        its own env processors, as LeRobot gives X-VLA its own, overrides this."""
        return None

    def ready(self) -> None:  # noqa: B027
        """Return once the policy can act; raise what keeps it from acting. An adapter may
        load in the background after its constructor has checked its inputs (the LeRobot
        adapter loads its weights while the env workers start); reset and act wait for it."""

    def close(self) -> None:  # noqa: B027
        """Free what the policy holds."""


def make_policy(ctx: PolicyContext) -> Policy:
    """Build the policy named by `ctx.config.type` (a class or factory taking the context)."""
    factory = POLICIES.get(ctx.config.type)
    policy = factory(ctx)
    if not isinstance(policy, Policy):
        raise ConfigError(
            f"--policy.type={ctx.config.type} built a {type(policy).__module__}.{type(policy).__qualname__}, which is "
            f"not a rollbench Policy: subclass rollbench.policies.base.Policy (docs/adding_a_policy.md)"
        )
    return policy


def check_actions(actions: Any, n: int, action_space: Any, who: str) -> np.ndarray:
    """Validate a policy's output for `n` rows; raise PolicyError saying what is wrong."""
    import gymnasium as gym  # heavy: gymnasium (~90 ms); `rollbench --help` imports this module

    arr = np.asarray(actions)
    if isinstance(action_space, gym.spaces.Discrete):
        expected: tuple[int, ...] = (n,)
    else:
        expected = (n, *action_space.shape)
    if arr.shape != expected:
        raise PolicyError(
            f"policy {who} returned actions of shape {arr.shape} for {n} envs; expected {expected}"
        )
    if isinstance(action_space, gym.spaces.Discrete):
        if arr.dtype.kind not in "iu":
            raise PolicyError(
                f"policy {who} returned actions of dtype {arr.dtype} for a Discrete({action_space.n}) "
                f"action space; expected integers"
            )
        lo, hi = int(action_space.start), int(action_space.start + action_space.n - 1)
        if arr.size and (arr.min() < lo or arr.max() > hi):
            raise PolicyError(f"policy {who} returned actions outside {lo}..{hi} for a Discrete({action_space.n}) action space")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).any(axis=tuple(range(1, arr.ndim))).sum()) if arr.ndim > 1 else int((~np.isfinite(arr)).sum())
        raise PolicyError(f"policy {who} returned NaN or infinite actions for {bad} of {n} envs")
    return arr
