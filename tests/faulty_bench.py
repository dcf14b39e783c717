"""A benchmark plugin whose env misbehaves on chosen seeds, for fault-injection tests.

Registered like any third-party benchmark (`--env.type=faulty`, loaded through
$ROLLBENCH_PLUGINS=faulty_bench). On `crash_seed` the env SIGKILLs its own process at its
first step; on `segv_seed` it sends itself SIGSEGV at its first step (a simulator's
segfault); on `hang_seed` it sleeps forever at its first step; on `error_seed` it raises
at its first step.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rollbench.benchmarks.fake import TASKS, CountdownEnv, FakeConfig
from rollbench.config.env import register_benchmark
from rollbench.config.fields import opt


class FaultyEnv(CountdownEnv):
    def __init__(self, scale: float, max_steps: int, crash: int, hang: int, error: int, segv: int = -1) -> None:
        super().__init__(scale, max_steps)
        self.faults = {crash: "crash", hang: "hang", error: "error", segv: "segv"}
        self.fault: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.fault = self.faults.get(seed if seed is not None else -99)
        return super().reset(seed=seed, options=options)

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.fault == "crash" and self._t == 0:
            print("faulty env: about to SIGKILL myself", flush=True)
            import sys

            print("faulty env: goodbye from stderr", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fault == "segv" and self._t == 0:
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.fault == "hang" and self._t == 0:
            time.sleep(3600)
        if self.fault == "error" and self._t == 0:
            raise RuntimeError("faulty env: injected error")
        return super().step(action)


@register_benchmark("faulty")
@dataclass(frozen=True)
class FaultyConfig(FakeConfig):
    """The fake benchmark with injected faults (tests only)."""

    crash_seed: int = opt(-1, "reset seed whose episode SIGKILLs its worker")
    hang_seed: int = opt(-1, "reset seed whose episode hangs")
    error_seed: int = opt(-1, "reset seed whose episode raises")
    segv_seed: int = opt(-1, "reset seed whose episode segfaults its process")

    def make_task_env(self, task: str) -> gym.Env:
        return FaultyEnv(TASKS[task], self.max_steps, self.crash_seed, self.hang_seed, self.error_seed, self.segv_seed)


class IndexCheckEnv(CountdownEnv):
    """Refuses a reset that does not know its episode yet: the scheduler must set
    `episode_index` before the reset (unit seeds are `1000 + episode_index`; with
    --seeds=1000,2000,... episode i of seed s has seed s + i and index i)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.index_at_reset = getattr(self, "episode_index", None)
        if seed is not None and self.index_at_reset != (seed - 1000) % 1000:
            raise RuntimeError(f"reset(seed={seed}) saw episode_index={self.index_at_reset}, expected {(seed - 1000) % 1000}")
        return super().reset(seed=seed, options=options)


@register_benchmark("indexed")
@dataclass(frozen=True)
class IndexedConfig(FakeConfig):
    """The fake benchmark whose envs check they got the episode index before each reset."""

    uses_episode_index = True

    def make_task_env(self, task: str) -> gym.Env:
        return IndexCheckEnv(TASKS[task], self.max_steps)
