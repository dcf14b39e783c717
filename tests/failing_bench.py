"""A test plugin (load with ROLLBENCH_PLUGINS=failing_bench): the fake benchmark, except
that resetting an env with the seed in $RB_FAIL_SEED raises, so one chosen shard fails.

The trigger is an environment variable, not a field, so that the run's identity is the
same with and without it: the rerun command a failed launch prints can then succeed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rollbench.benchmarks.fake import TASKS, CountdownEnv, FakeConfig
from rollbench.config.env import register_benchmark


class FailingCountdownEnv(CountdownEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None and str(seed) == os.environ.get("RB_FAIL_SEED"):
            raise RuntimeError(f"injected failure at seed {seed}")
        return super().reset(seed=seed, options=options)


@register_benchmark("fake_failing")
@dataclass(frozen=True)
class FailingFakeConfig(FakeConfig):
    """The fake benchmark; reset with seed $RB_FAIL_SEED raises."""

    def make_task_env(self, task: str) -> gym.Env:
        return FailingCountdownEnv(TASKS[task], self.max_steps, self.step_sleep_s)
