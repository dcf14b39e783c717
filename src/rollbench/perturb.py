"""Robustness sweeps: conditions, their axes, and what each does to one episode.

    --eval.perturb="action.noise=0,0.2,0.5;action.latency=0,2"   (the flag may also repeat)
        -> conditions: the control, then one per level of each axis (the other axes at rest):
           "", "action.noise=0.2", "action.noise=0.5", "action.latency=2"

A condition is part of a unit (`EpisodeUnit.condition`): episode i of condition c is the
control's episode i (its seed, its episode index) with the condition's axes applied at the
boundary between env and policy (`scheduler.common.StepContext`), so a perturbed episode is
a function of (condition, task, i), whatever ran beside it. Every draw of an axis comes from
a generator seeded by (the episode's seed, the condition, the axis, the step), so a retried
call draws the same and adding an axis to a sweep changes no other axis's draws.

Axes (generic: every benchmark that has what they act on):

    action.noise     Gaussian noise of this standard deviation (action units) added to every
                     action; clipped to a Box action space's bounds
    action.latency   the policy acts on the observation of k steps before (the first one
                     until k steps have passed): its answer reaches the env k control steps late
    state.noise      Gaussian noise of this standard deviation added to the low-dimensional
                     state the policy sees (observation.state, observation.environment_state)
    language.drop    1: the task's instruction is removed (the policy's task string and the
                     episode's description are empty)

Native axes (applied inside the simulator, at the episode's reset, by the benchmarks that
declare them: `BenchmarkConfig.native_axes`; MetaWorld and LIBERO apply all four). The
scheduler stages the unit's condition on each env before its reset, as it stages the episode
index (`config.env.set_condition`); the env applies the levels after its own reset placement
and undoes them at its next reset. Each draw comes from `reset_stream` (the episode's seed,
the condition, the axis), so it is a function of (condition, task, i):

    camera.shift     every camera the policy sees (and the video's) moved this far, in metres,
                     in a direction drawn uniformly on the sphere, one per camera
    camera.rotate    every such camera turned by this angle, in degrees, about an axis (in its
                     own frame) drawn uniformly on the sphere, one per camera
    light.intensity  the diffuse and ambient light of every scene light and the headlight
                     multiplied by this factor (1 = as at rest)
    object.shift     every free object (a body with a free joint: what the robot moves, not
                     fixtures such as doors and drawers) moved this far, in metres, in one
                     horizontal direction drawn uniformly, after the benchmark placed it
"""

from __future__ import annotations

import functools
import zlib
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rollbench.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class Axis:
    name: str
    help: str
    integer: bool  # levels are whole numbers (steps)
    low: float
    high: float
    neutral: float  # the level that changes nothing (the control's)
    #: a native axis: the built-in benchmarks that apply it inside their simulator, at reset
    #: (the env, not the Perturber, applies it; a benchmark declares it in `native_axes`)
    native: tuple[str, ...] = ()

    def level(self, raw: str, flag: str) -> float:
        """`raw` as a level of this axis, or a one-line ConfigError naming `flag`."""
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{flag}: level {raw!r} of {self.name} is not a number; {self.allowed()}") from None
        if self.integer and value != int(value):
            raise ConfigError(f"{flag}: level {raw} of {self.name} is not a whole number of steps; {self.allowed()}")
        if not self.low <= value <= self.high:
            raise ConfigError(f"{flag}: level {raw} of {self.name} is out of range; {self.allowed()}")
        return float(int(value)) if self.integer else value

    def allowed(self) -> str:
        if self.low == 0 and self.high == 1 and self.integer:
            return f"{self.name} takes 0 or 1 ({self.help})"
        kind = "whole numbers" if self.integer else "numbers"
        return f"{self.name} takes {kind} from {self.low:g} to {self.high:g} ({self.help})"


AXES: dict[str, Axis] = {a.name: a for a in (
    Axis("action.noise", "standard deviation of Gaussian noise added to every action, in action units", False, 0.0, 100.0, 0.0),
    Axis("action.latency", "control steps between an observation and the action the policy chose on it", True, 0, 1000, 0),
    Axis("state.noise", "standard deviation of Gaussian noise added to the state vectors", False, 0.0, 100.0, 0.0),
    Axis("language.drop", "1 removes the task's instruction", True, 0, 1, 0),
)}
NATIVE_BENCHMARKS = ("metaworld", "libero")
AXES.update({a.name: a for a in (
    Axis("camera.shift", "metres each camera moves, in a direction drawn per episode", False, 0.0, 1.0, 0.0, NATIVE_BENCHMARKS),
    Axis("camera.rotate", "degrees each camera turns, about an axis drawn per episode", False, 0.0, 180.0, 0.0, NATIVE_BENCHMARKS),
    Axis("light.intensity", "factor on the scene lights' diffuse and ambient, 1 at rest", False, 0.0, 10.0, 1.0, NATIVE_BENCHMARKS),
    Axis("object.shift", "metres the free objects move on the table, in a direction drawn per episode", False, 0.0, 0.5, 0.0,
         NATIVE_BENCHMARKS),
)})


@dataclass(frozen=True)
class Condition:
    """Axis levels away from rest; none is the control."""

    levels: tuple[tuple[str, float], ...] = ()

    @property
    def id(self) -> str:
        """"" for the control, else "axis=level;axis=level" (what the log and eval_info.json say)."""
        return ";".join(f"{name}={value:g}" for name, value in self.levels)

    def get(self, axis: str) -> float:
        return dict(self.levels).get(axis, AXES[axis].neutral)

    def to_json(self) -> dict[str, float]:
        return dict(self.levels)

    @property
    def policy_side(self) -> bool:
        """Has an axis the Perturber applies (a native axis is the env's)."""
        return any(not AXES[name].native for name, _ in self.levels)

    @property
    def native_levels(self) -> dict[str, float]:
        """The levels of its native axes (what the env applies at reset)."""
        return {name: value for name, value in self.levels if AXES[name].native}


CONTROL = Condition()


def parse(spec: str, flag: str = "--eval.perturb") -> list[Condition]:
    """The conditions of `spec` ("AXIS=L1,L2;AXIS=..."): the control first, then each axis's
    levels in the order given (a level at rest is the control, not a condition of its own)."""
    conditions = [CONTROL]
    seen_axes: set[str] = set()
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, eq, levels = part.partition("=")
        name = name.strip()
        if not eq or not levels.strip():
            raise ConfigError(f"{flag}={part!r}: expected AXIS=LEVEL[,LEVEL...], e.g. action.noise=0,0.2,0.5")
        if name not in AXES:
            hint = did_you_mean(name, sorted(AXES))
            raise ConfigError(f"{flag}: unknown axis {name!r}.{hint} Axes: {', '.join(AXES)}")
        if name in seen_axes:
            raise ConfigError(f"{flag}: axis {name} is given twice; list all its levels once: {name}=L1,L2")
        seen_axes.add(name)
        axis = AXES[name]
        for raw in levels.split(","):
            value = axis.level(raw.strip(), flag)
            cond = CONTROL if value == axis.neutral else Condition(((name, value),))
            if cond not in conditions:
                conditions.append(cond)
    return conditions


@functools.cache
def condition(cid: str) -> Condition:
    """The condition whose id is `cid` (as a unit carries it)."""
    if not cid:
        return CONTROL
    levels = []
    for part in cid.split(";"):
        name, _, value = part.partition("=")
        levels.append((name, AXES[name].level(value, "condition")))
    return Condition(tuple(levels))


def _stream(seed: int, cid: str, axis: str, step: int) -> np.random.Generator:
    """The draws of `axis` at `step` of the episode with `seed` under condition `cid`."""
    return np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(cid.encode()), zlib.crc32(axis.encode()), step])


def reset_stream(seed: int, cid: str, axis: str) -> np.random.Generator:
    """The draws of native `axis` at the reset of the episode with `seed` under condition `cid`."""
    return _stream(seed, cid, axis, 0)


class Perturber:
    """One episode's condition, applied row by row where the policy meets the env.

    `inputs` gives the row the policy sees at this step (nothing is kept: a call that fails
    and is made again sees the same), `outputs` the action the env gets; then `advance`
    commits the step."""

    def __init__(self, cond: Condition, seed: int, action_bounds: tuple[np.ndarray, np.ndarray] | None) -> None:
        self.cid = cond.id
        self.seed = seed
        self.bounds = action_bounds
        self.latency = int(cond.get("action.latency"))
        self.state_noise = cond.get("state.noise")
        self.action_noise = cond.get("action.noise")
        self.drop_language = bool(cond.get("language.drop"))
        self.step = 0
        self.history: deque[Mapping[str, Any]] = deque(maxlen=self.latency)

    def inputs(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The features the policy sees at this step, `row` being the env's (LeRobot keys, one row)."""
        # the history holds the last k rows: its first is the row of k steps before (or the
        # episode's first, while fewer than k steps have passed)
        out = dict(self.history[0]) if self.history else dict(row)
        if self.state_noise:
            rng = _stream(self.seed, self.cid, "state.noise", self.step)
            for key in STATE_KEYS:  # in this order, so a key's draws never depend on another's presence
                if key in out:
                    state = np.asarray(out[key])
                    noise = rng.normal(0.0, self.state_noise, state.shape)
                    out[key] = (state + noise).astype(state.dtype, copy=False)
        return out

    def prompt(self, text: str) -> str:
        return "" if self.drop_language else text

    def outputs(self, action: np.ndarray) -> np.ndarray:
        if not self.action_noise:
            return action
        noisy = action + _stream(self.seed, self.cid, "action.noise", self.step).normal(0.0, self.action_noise, action.shape)
        if self.bounds is not None:
            noisy = np.clip(noisy, *self.bounds)
        return noisy.astype(action.dtype, copy=False)

    def advance(self, row: Mapping[str, Any]) -> None:
        """The step was taken; `row` (the env's features of it) joins the history."""
        if self.latency:
            self.history.append({k: np.array(v, copy=True) for k, v in row.items()})
        self.step += 1


def check_benchmark(conditions: list[Condition], features: Mapping[str, Any], env_type: str, action_space: Any,
                    native_axes: Collection[str] = ()) -> None:
    """Refuse, before any episode, an axis the benchmark has nothing for (`native_axes`: the
    native ones its envs apply)."""
    for cond in conditions:
        for name, _ in cond.levels:
            if AXES[name].native and name not in native_axes:
                raise ConfigError(f"--eval.perturb: {name} is applied inside the simulator, which --env.type={env_type} "
                                  f"does not do; benchmarks that apply it: {', '.join(AXES[name].native)}")
            if name == "action.noise" and not hasattr(action_space, "low"):
                raise ConfigError(f"--eval.perturb: action.noise adds Gaussian noise to continuous actions; the actions "
                                  f"of --env.type={env_type} are {action_space}")
            need = NEEDS.get(name)
            if need is not None and not need(features):
                raise ConfigError(
                    f"--eval.perturb: {name} acts on {' or '.join(STATE_KEYS)}, which --env.type={env_type} does not "
                    f"give (its observation: {', '.join(k for k in sorted(features) if k != 'action') or 'none'})"
                )


#: what state.noise perturbs, where the benchmark gives it
STATE_KEYS = ("observation.state", "observation.environment_state")
NEEDS: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "state.noise": lambda features: any(k in features for k in STATE_KEYS),
}
