r"""One episode, from its unit to its record: the one place an env is reset and stepped.

    tracker = EpisodeTracker.of(bench, unit, record_mode, filming, attempt)
    obs = tracker.reset(bench, env)             # reset `env` into the unit (index, seed); first frame
    obs, ended = tracker.step(bench, env, obs, action)   # one env step, accounted and filmed
    record = tracker.record(worker)             # once it ended (its video in place first)
    tracker.drop()                              # or: it will not end (an error, a cancel)

An env worker's slots, tune's probe processes and `episode.context.play_episode` (one
episode, policy included: what a simple executor calls) step single envs through these
methods. Same-process lockstep steps a gymnasium vector env instead, all rows at once,
because lerobot-eval does (its autoreset and batch are what per-action parity needs):
`Rows` resets and steps it and hands each row's step to the row's tracker (`update`,
`Film`). The project's two env steps are these: `EpisodeTracker.step` and `Rows.step`.

An episode ends at termination, truncation or the benchmark's step limit; its success is
"succeeded at any step" (LeRobot's `any` over the episode, ManiSkill's `success_once`).
`n_steps` counts every env step taken, the last included: the episode's clock is one env
step per action, kept here alone, so that another clock (a policy that acts every k steps,
a simulated latency) is a change to this file and its callers' action source, not to the
schedulers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rollbench.config.env import BenchmarkConfig, set_condition, set_episode_index
from rollbench.config.eval import RecordRule
from rollbench.episode.video import Film, Filming, vector_frames
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
    film: Film | None = None  # set: this episode is filmed
    attempt: int = 0  # the unit's tries before this one (its video's key and its record's)

    def __post_init__(self) -> None:
        if self.record_mode is not None and self.record_mode.wants(self.unit.condition) and self.frames is None:
            self.frames = Frames(Sensor.of(self.unit.condition, self.unit.seed))

    @classmethod
    def of(
        cls, bench: BenchmarkConfig, unit: EpisodeUnit, record_mode: RecordRule | None = None,
        filming: Filming | None = None, attempt: int = 0,
    ) -> EpisodeTracker:
        """The tracker of `unit`'s episode on `bench`: its step limit and success rule, its
        frames (--eval.recording) and its video (if `filming` wants it)."""
        film = filming.film(unit, attempt) if filming is not None else None
        return cls(unit, bench.effective_max_steps(unit.task), bench.success, record_mode=record_mode, film=film,
                   attempt=attempt)

    def reset(self, bench: BenchmarkConfig, env: Any) -> Any:
        """Reset one env into this unit (its episode index where the benchmark reads one, its
        condition where the benchmark applies native axes, its seed); the episode's clock
        starts. The first observation."""
        set_episode_index(bench, env, [self.unit.env_index])
        set_condition(bench, env, [self.unit.condition])
        obs, _ = env.reset(seed=self.unit.seed)
        self.started = time.monotonic()
        if self.film is not None:
            self.film.shoot(env)
        return obs

    def step(self, bench: BenchmarkConfig, env: Any, obs: Any, action: Any) -> tuple[Any, bool]:
        """Send `action` (chosen on `obs`) to one env and account the step: (the next
        observation, whether the episode has ended)."""
        if self.frames is not None:
            self.frames.acted(bench.to_features(obs), action)
        obs, reward, terminated, truncated, info = env.step(action)
        ended = self.update(reward, terminated, truncated, info)
        if self.film is not None and self.film.wants(self.n_steps, ended):
            self.film.shoot(env)
        return obs, ended

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

    def drop(self) -> None:
        """The episode will not end (its env failed, it was cancelled or lost): no video of it."""
        if self.film is not None:
            self.film.drop()
            self.film = None

    def record(self, worker: str) -> EpisodeRecord:
        """The ended episode's record, its video (if filmed) in place before it."""
        video_path = self.film.finish() if self.film is not None else None
        self.film = None
        return EpisodeRecord.from_unit(
            self.unit,
            success=self.success,
            sum_reward=self.sum_reward,
            max_reward=self.max_reward if self.n_steps else 0.0,
            n_steps=self.n_steps,
            wall_s=time.monotonic() - self.started,
            worker=worker,
            attempt=self.attempt,
            finished_at=time.time(),
            video_path=video_path,
            frames=self.kept_frames(),
        )


class Rows:
    """A gymnasium vector env's rows as the episodes of `units` (lockstep's batch in this
    process): reset together, stepped together, each row's step accounted and filmed by its
    tracker. A short batch pads its rows with copies of the first unit; padding rows and
    rows whose episode ended step on (as lerobot-eval's do) unaccounted."""

    def __init__(
        self, bench: BenchmarkConfig, vec: Any, units: list[EpisodeUnit], n_envs: int,
        record_mode: RecordRule | None = None, filming: Filming | None = None,
    ) -> None:
        self.bench, self.vec = bench, vec
        self.padded = units + [units[0]] * (n_envs - len(units))
        self.trackers = [EpisodeTracker.of(bench, u, record_mode, filming) for u in units]
        self.active = np.array([i < len(units) for i in range(n_envs)])
        filmed = any(t.film is not None for t in self.trackers)  # (none without `filming`)
        self.grab = vector_frames(vec, units[0].task, filming.plan.size) if filming is not None and filmed else None

    def running(self) -> list[EpisodeUnit]:
        return [t.unit for i, t in enumerate(self.trackers) if self.active[i]]

    def reset(self) -> Any:
        """Every row into its unit (episode index, condition, seed); the first frames."""
        set_episode_index(self.bench, self.vec, [u.env_index for u in self.padded])
        set_condition(self.bench, self.vec, [u.condition for u in self.padded])
        obs, _ = self.vec.reset(seed=[u.seed for u in self.padded])
        for t in self.trackers:
            t.started = time.monotonic()
        self._film(range(len(self.trackers)), ())
        return obs

    def step(self, obs: Any, actions: Any) -> tuple[Any, list[int]]:
        """Send `actions` (chosen on `obs`, a row each) to the vector env: (the next
        observations, the rows whose episode ended at this step)."""
        live = [int(i) for i in np.flatnonzero(self.active)]
        recording = [i for i in live if self.trackers[i].frames is not None]
        if recording:
            features = self.bench.to_features(obs)
            for i in recording:
                frames = self.trackers[i].frames
                assert frames is not None
                frames.acted(take_row(features, i), actions[i])
        obs, rewards, terminated, truncated, info = self.vec.step(actions)
        infos = split_vector_info(info, len(self.active))
        ended = [i for i in live if self.trackers[i].update(rewards[i], terminated[i], truncated[i], infos[i])]
        self._film(live, ended)
        self.active[ended] = False
        return obs, ended

    def _film(self, rows: Sequence[int], ended: Sequence[int]) -> None:
        if self.grab is None:
            return
        shot = [i for i in rows if (f := self.trackers[i].film) is not None and f.wants(self.trackers[i].n_steps, i in ended)]
        for i, frame in zip(shot, self.grab(shot), strict=True):
            film = self.trackers[i].film
            assert film is not None
            film.add(frame)


def take_row(batch: Any, row: int) -> Any:
    """Row `row` of a batched observation, without the batch axis."""
    if isinstance(batch, dict):
        return {k: take_row(v, row) for k, v in batch.items()}
    return np.asarray(batch)[row]


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
