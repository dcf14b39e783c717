"""What every scheduling mode shares: the run's benchmark, policy and step rules."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from rollbench.config.env import BenchmarkConfig
from rollbench.config.policy import PolicyConfig
from rollbench.errors import PolicyError
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import EpisodeStart, Policy, PolicyContext, check_actions, make_policy


def cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def driver_threads(cores: int, workers: int) -> int:
    """torch intra-op threads for a policy in the driver beside `workers` env workers: the
    cores they leave, at least one (the continuous scheduler sets it, `rollbench tune`
    models it)."""
    return max(1, cores - workers)


@dataclass(frozen=True)
class StepContext:
    """Everything needed to turn observations into actions and account the results.

    It builds policies but never holds one: whoever runs a scheduler hands it the policy
    to use (and closes it), so a checkpoint loads once per process.
    """

    benchmark: BenchmarkConfig
    policy_config: PolicyConfig

    @cached_property
    def action_space(self) -> Any:
        first = next(task for names in self.benchmark.tasks().values() for task in names)
        env = self.benchmark.make_task_env(first)
        try:
            return env.action_space
        finally:
            env.close()

    def make_policy(self) -> Policy:
        return make_policy(PolicyContext(self.policy_config, self.benchmark, self.action_space))

    def episode_start(self, unit: EpisodeUnit) -> EpisodeStart:
        return EpisodeStart(
            task_group=unit.task_group,
            task=unit.task,
            description=self.benchmark.task_description(unit.task),
            episode_index=unit.episode_index,
            seed=unit.seed,
        )

    def policy_name(self) -> str:
        cfg = self.policy_config
        return f"{cfg.type!r}" + (f" ({cfg.path})" if cfg.path else "")

    @cached_property
    def processors(self) -> tuple[Any, Any]:
        return self.benchmark.get_env_processors()

    def act(self, policy: Policy, obs: Any, slots: Sequence[int], descriptions: Sequence[str]) -> np.ndarray:
        """Observations (as the env returned them, batched) -> validated env actions."""
        pre, post = self.processors  # built once: this runs every step
        batch: dict[str, Any] = pre(self.benchmark.to_features(obs))
        batch["task"] = list(descriptions)
        try:
            raw = policy.act(batch, slots)
        except PolicyError:
            raise
        except Exception as err:  # the policy's own bug: name it, keep the cause for --debug
            raise PolicyError(f"policy {self.policy_name()} raised {type(err).__name__}: {err}") from err
        actions = post(np.asarray(raw))
        return check_actions(actions, len(slots), self.action_space, self.policy_name())
