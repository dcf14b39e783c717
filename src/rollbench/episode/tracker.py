"""One episode, from its unit to its record: shared by every scheduling mode.

    tracker = EpisodeTracker.of(bench, unit)    # what the episode has done so far
    obs = tracker.reset(bench, env)             # reset `env` into the unit (index, seed)
    obs, ended = tracker.step(bench, env, obs, action)   # one env step, accounted
    record = tracker.record(worker)             # once it ended

An env worker's slots, tune's probe processes and `episode.context.play_episode` (one
episode, policy included: what a simple executor calls) step single envs through these
methods. Lockstep steps a gymnasium vector env instead, all rows at once, because
lerobot-eval does (its autoreset and batch are what per-action parity needs), and feeds
each row's step to the row's tracker through `update`.

An episode ends at termination, truncation or the benchmark's step limit; its success is
"succeeded at any step" (LeRobot's `any` over the episode, ManiSkill's `success_once`).
`n_steps` counts every env step taken, the last included.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rollbench.config.env import BenchmarkConfig, set_condition, set_episode_index
from rollbench.config.eval import RecordRule
from rollbench.perturb import Sensor
from rollbench.plan import EpisodeUnit
from rollbench.results.records import EpisodeRecord


class Frames:
    """One episode's frames for a LeRobot dataset (--eval.recording), kept only while it runs:
    frame t holds the observation at step t (LeRobot keys, as the robot's sensors gave it: the
    env's, through the sensor axes of an --eval.perturb condition, `perturb.Sensor`), the
    action the env executed (after action.noise), and what that step gave (next.reward,
    next.done, next.success)."""

    def __init__(self, sensor: Sensor | None = None) -> None:
        self.columns: dict[str, list[Any]] = {}
        self._acted: tuple[Mapping[str, Any], Any] | None = None
        self.sensor = sensor
        self.n = 0  # frames stepped: the step the sensor's draws are of

    def acted(self, features: Mapping[str, Any], action: Any) -> None:
        self._acted = (features if self.sensor is None else self.sensor(features, self.n), action)

    def stepped(self, reward: float, done: bool, success: bool) -> None:
        assert self._acted is not None, "a step recorded without the action that made it"
        features, action = self._acted
        self._acted = None
        row = {**features, "action": action, "next.reward": reward, "next.done": done, "next.success": success}
        for key, value in row.items():  # a copy: an env (or a vector env's buffer) may reuse its arrays
            self.columns.setdefault(key, []).append(np.array(value))
        self.n += 1

    def pack(self) -> dict[str, np.ndarray]:
        """Every key's values stacked along time (one array each: cheap to send through a pipe)."""
        return {key: np.stack(values) for key, values in self.columns.items()}


@dataclass
class EpisodeTracker:
    unit: EpisodeUnit
    max_steps: int
    success_rule: Callable[[Mapping[str, Any]], bool]
    n_steps: int = 0
    sum_reward: float = 0.0
    max_reward: float = -math.inf
    success: bool = False
    started: float = field(default_factory=time.monotonic)
    record_mode: RecordRule | None = None  # --eval.recording: which episodes' frames to keep
    frames: Frames | None = None

    def __post_init__(self) -> None:
        if self.record_mode is not None and self.record_mode.wants(self.unit.condition) and self.frames is None:
            self.frames = Frames(Sensor.of(self.unit.condition, self.unit.seed))

    @classmethod
    def of(cls, bench: BenchmarkConfig, unit: EpisodeUnit, record_mode: RecordRule | None = None) -> EpisodeTracker:
        """The tracker of `unit`'s episode on `bench`: its step limit and success rule."""
        return cls(unit, bench.effective_max_steps(unit.task), bench.success, record_mode=record_mode)

    def reset(self, bench: BenchmarkConfig, env: Any) -> Any:
        """Reset one env into this unit (its episode index where the benchmark reads one, its
        condition where the benchmark applies native axes, its seed); the episode's clock
        starts. The first observation."""
        set_episode_index(bench, env, [self.unit.env_index])
        set_condition(bench, env, [self.unit.condition])
        obs, _ = env.reset(seed=self.unit.seed)
        self.started = time.monotonic()
        return obs

    def step(self, bench: BenchmarkConfig, env: Any, obs: Any, action: Any) -> tuple[Any, bool]:
        """Send `action` (chosen on `obs`) to one env and account the step: (the next
        observation, whether the episode has ended)."""
        if self.frames is not None:
            self.frames.acted(bench.to_features(obs), action)
        obs, reward, terminated, truncated, info = env.step(action)
        return obs, self.update(reward, terminated, truncated, info)

    def update(self, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> bool:
        """Account one step; True when the episode has ended."""
        self.n_steps += 1
        reward = float(reward)
        self.sum_reward += reward
        self.max_reward = max(self.max_reward, reward)
        succeeded = self.success_rule(info)
        if succeeded:
            self.success = True
        ended = bool(terminated or truncated or self.n_steps >= self.max_steps)
        if self.frames is not None:
            self.frames.stepped(reward, ended, bool(succeeded))
        return ended

    def kept_frames(self) -> dict[str, np.ndarray] | None:
        """The episode's frames, if --eval.recording keeps an episode that ended this way."""
        rule = self.record_mode
        if self.frames is None or rule is None or not rule.keeps(self.success, self.unit.condition):
            return None
        return self.frames.pack()

    def record(self, worker: str, attempt: int = 0, video_path: str | None = None) -> EpisodeRecord:
        return EpisodeRecord.from_unit(
            self.unit,
            success=self.success,
            sum_reward=self.sum_reward,
            max_reward=self.max_reward if self.n_steps else 0.0,
            n_steps=self.n_steps,
            wall_s=time.monotonic() - self.started,
            worker=worker,
            attempt=attempt,
            finished_at=time.time(),
            video_path=video_path,
            frames=self.kept_frames(),
        )


def split_vector_info(info: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """Per-env info dicts from a gymnasium vector env's info (arrays + `_key` masks)."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get(f"_{key}")
        if isinstance(value, Mapping):
            for i, sub in enumerate(split_vector_info(value, n)):
                if mask is None or mask[i]:
                    out[i][key] = sub
            continue
        arr = value if isinstance(value, np.ndarray | list | tuple) else None
        for i in range(n):
            if mask is not None and not mask[i]:
                continue
            out[i][key] = arr[i] if arr is not None and len(arr) == n else value
    return out
