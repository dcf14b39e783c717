"""Robustness sweeps: conditions, their axes, and what each does to one episode.

    --eval.perturb="action.noise=0,0.2,0.5;action.latency=0,2"   (the flag may also repeat)
        -> conditions: the control, then one per level of each axis (the other axes at rest):
           "", "action.noise=0.2", "action.noise=0.5", "action.latency=2"

A condition is part of a unit (`EpisodeUnit.condition`): episode i of condition c is the
control's episode i (its seed, its episode index) with the condition's axes applied at the
boundary between env and policy (`episode.context.StepContext`), so a perturbed episode is
a function of (condition, task, i), whatever ran beside it. Every draw of an axis comes from
a generator seeded by (the episode's seed, the axis and its level, the camera, the step), never
by the rest of the condition: a retried call draws the same, and conditions that share an
axis's level share its draws (common random numbers: `action.noise=1` and
`action.noise=1&language.drop=1` add the same noise to the same episode, so their difference is
the instruction's alone).

Axes (generic: every benchmark that has what they act on):

    action.noise     Gaussian noise of this standard deviation (action units) added to every
                     action; clipped to a Box action space's bounds
    action.latency   the policy acts on the observation of k steps before (the first one
                     until k steps have passed): its answer reaches the env k control steps late
    state.noise      Gaussian noise of this standard deviation added to the low-dimensional
                     state the policy sees (observation.state, observation.environment_state)
    language.drop    1: the task's instruction is removed (the policy's task string and the
                     episode's description are empty)
    language.paraphrase  k: the instruction is the k-th paraphrase of the task's in the table
                     --eval.paraphrases gives (by task name or instruction)

    image.*          every camera image the policy sees (observation.image, observation.images.*),
                     applied as a camera would degrade them, in this order: image.shift (the frame
                     moved by this fraction of its size, in a direction drawn per episode, black
                     where nothing was seen), image.occlusion (a grey patch over this fraction of
                     the frame, placed per episode), image.brightness and image.contrast (factors,
                     1 at rest), image.blur (Gaussian, sigma in pixels), image.noise (Gaussian,
                     standard deviation as a fraction of the full pixel range, drawn each step),
                     image.jpeg (compressed at this JPEG quality, 1-100; 0 at rest). uint8 HWC
                     frames (rollbench's benchmarks) and float CHW frames in [0, 1] (LeRobot's
                     bridge) are both taken and given back as they came.

Native axes (applied inside the simulator, at the episode's reset, by the benchmarks that
declare them: `BenchmarkConfig.native_axes`; MetaWorld and LIBERO apply all four). The
scheduler stages the unit's condition on each env before its reset, as it stages the episode
index (`config.env.set_condition`); the env applies the levels after its own reset placement
and undoes them at its next reset. Each draw comes from `reset_stream` (the episode's seed,
the axis and its level), so it is a function of (condition, task, i):

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
import io
import itertools
import json
import math
import zlib
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rollbench.errors import ConfigError, did_you_mean

tomllib: Any
try:
    import tomllib
except ImportError:  # Python 3.10: sweep and paraphrase files in JSON only
    tomllib = None


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
        if not math.isfinite(value):  # int() of it would raise, and no axis has an endless level
            raise ConfigError(f"{flag}: level {raw} of {self.name} is not a finite number; {self.allowed()}")
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
    Axis("language.paraphrase", "k gives the k-th paraphrase of the task's instruction from --eval.paraphrases", True, 0, 1000, 0),
    Axis("image.noise", "standard deviation of Gaussian pixel noise, as a fraction of the pixel range", False, 0.0, 1.0, 0.0),
    Axis("image.blur", "sigma of a Gaussian blur, in pixels", False, 0.0, 50.0, 0.0),
    Axis("image.brightness", "factor on every pixel; 1 at rest", False, 0.0, 10.0, 1.0),
    Axis("image.contrast", "factor on every pixel's distance from the frame's mean grey; 1 at rest", False, 0.0, 10.0, 1.0),
    Axis("image.occlusion", "fraction of the frame under a grey patch placed per episode", False, 0.0, 1.0, 0.0),
    Axis("image.jpeg", "JPEG quality the frames are compressed at, 1 worst to 100 best; 0 at rest (not compressed)", True, 0, 100, 0),
    Axis("image.shift", "fraction of the frame's size it moves by, in a direction drawn per episode", False, 0.0, 1.0, 0.0),
)}
NATIVE_BENCHMARKS = ("metaworld", "libero")
AXES.update({a.name: a for a in (
    Axis("camera.shift", "metres each camera moves, in a direction drawn per episode", False, 0.0, 1.0, 0.0, NATIVE_BENCHMARKS),
    Axis("camera.rotate", "degrees each camera turns, about an axis drawn per episode", False, 0.0, 180.0, 0.0, NATIVE_BENCHMARKS),
    Axis("light.intensity", "factor on the scene lights' diffuse and ambient, 1 at rest", False, 0.0, 10.0, 1.0, NATIVE_BENCHMARKS),
    Axis("object.shift", "metres the free objects move on the table, in a direction drawn per episode", False, 0.0, 0.5, 0.0,
         NATIVE_BENCHMARKS),
)})

#: the image axes in the order a frame goes through them (geometry, scene, light, optics, sensor, codec)
IMAGE_AXES = ("image.shift", "image.occlusion", "image.brightness", "image.contrast", "image.blur", "image.noise", "image.jpeg")


@dataclass(frozen=True)
class Condition:
    """Axis levels away from rest, in AXES's order; none is the control."""

    levels: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, levels: Mapping[str, float]) -> Condition:
        """The condition of `levels` (those at rest dropped), whatever order they came in."""
        order = list(AXES)
        return cls(tuple(sorted(((n, v) for n, v in levels.items() if v != AXES[n].neutral), key=lambda nv: order.index(nv[0]))))

    @property
    def id(self) -> str:
        """"" for the control, "axis=level" for one axis, "axis=level&axis=level" for a crossed
        condition (what the log and eval_info.json say)."""
        return "&".join(axis_id(name, value) for name, value in self.levels)

    def get(self, axis: str) -> float:
        return dict(self.levels).get(axis, AXES[axis].neutral)

    def to_json(self) -> dict[str, float]:
        return dict(self.levels)

    @property
    def policy_side(self) -> bool:
        """Has an axis the Perturber applies (a native axis is the env's)."""
        return any(not AXES[name].native for name, _ in self.levels)

    @property
    def image_levels(self) -> dict[str, float]:
        """The levels of its image axes (what perturb_image applies to every camera frame)."""
        return {name: value for name, value in self.levels if name in IMAGE_AXES}

    @property
    def native_levels(self) -> dict[str, float]:
        """The levels of its native axes (what the env applies at reset)."""
        return {name: value for name, value in self.levels if AXES[name].native}


CONTROL = Condition()


def axis_id(name: str, value: float) -> str:
    """"name=level", the level spelled exactly: as `:g` spells it (0.1, 2, 1e-05: the ids of runs
    made before levels were exact) where that reads back as the same number, else as repr
    (0.1234567, which `:g` rounds to 0.123457, the spelling of another level)."""
    short = f"{value:g}"
    return f"{name}={short if float(short) == value else repr(value)}"


def check_sweep(conditions: list[Condition], spec: str, flag: str) -> None:
    """Refuse a sweep `spec` that holds no condition but the control: it would run as a plain
    run, which a user who asked for a sweep would not notice."""
    if len(conditions) > 1:
        return
    if any(p.strip() for p in spec.split(";")):
        why = "every level it gives is its axis's rest level (the control's, which every sweep runs anyway)"
    else:
        why = "it names no axis"
    raise ConfigError(f"{flag}: the sweep {spec!r} holds no condition besides the control: {why}; give at least one "
                      f"level away from rest, e.g. action.noise=0.1 (docs/robustness.md)")


def parse(spec: str, flag: str = "--eval.perturb") -> list[Condition]:
    """The conditions of `spec`: the control first, then, in the order given, each level of a
    part "AXIS=L1,L2" (one axis away from rest, the others at rest), or the one condition of a
    crossed part "AXIS=L&AXIS=L" (every named axis at its level at once). Parts are joined by
    ";". A level at rest is the control, not a condition of its own; a condition given twice
    runs once."""
    conditions = [CONTROL]
    seen_axes: set[str] = set()

    def add(cond: Condition) -> None:
        if cond not in conditions:
            conditions.append(cond)

    for part in filter(None, (p.strip() for p in spec.split(";"))):
        if "&" in part:
            levels: dict[str, float] = {}
            for item in (x.strip() for x in part.split("&")):
                name, raw = _axis_and_levels(item, flag)
                if "," in raw:
                    raise ConfigError(f"{flag}={part!r}: a crossed condition (AXIS=L&AXIS=L) takes one level per axis; "
                                      f"every combination of several levels is a sweep file's grid (--eval.sweep)")
                if name in levels:
                    raise ConfigError(f"{flag}={part!r}: axis {name} is given twice in one crossed condition")
                levels[name] = AXES[name].level(raw.strip(), flag)
            add(Condition.of(levels))
            continue
        name, raw = _axis_and_levels(part, flag)
        if name in seen_axes:
            raise ConfigError(f"{flag}: axis {name} is given twice; list all its levels once: {name}=L1,L2")
        seen_axes.add(name)
        for value in raw.split(","):
            add(Condition.of({name: AXES[name].level(value.strip(), flag)}))
    return conditions


def _axis_and_levels(part: str, flag: str) -> tuple[str, str]:
    name, eq, levels = part.partition("=")
    name = name.strip()
    if not eq or not levels.strip():
        raise ConfigError(f"{flag}={part!r}: expected AXIS=LEVEL[,LEVEL...], e.g. action.noise=0,0.2,0.5")
    if name not in AXES:
        hint = did_you_mean(name, sorted(AXES))
        raise ConfigError(f"{flag}: unknown axis {name!r}.{hint} Axes: {', '.join(AXES)}")
    return name, levels


SWEEP_KEYS = ("axes", "grid", "conditions")


def _read_table(path: str, flag: str) -> Any:
    """The JSON (or, for a .toml name, TOML) file at `path`, or a one-line ConfigError naming `flag`."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"{flag}: cannot read it ({err.strerror or err})") from None
    toml = path.endswith(".toml")
    if toml and tomllib is None:
        raise ConfigError(f"{flag}: reading TOML needs Python 3.11 or later; write it as JSON")
    try:
        return tomllib.loads(text) if toml else json.loads(text)
    except ValueError as err:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        raise ConfigError(f"{flag}: not valid {'TOML' if toml else 'JSON'} ({err})") from None


def sweep_file(path: str) -> str:
    """The `--eval.perturb` spec of sweep file `path` (JSON, or TOML on Python 3.11+):

        axes:        {AXIS: [levels]}   one axis at a time, as --eval.perturb=AXIS=L1,L2
        grid:        {AXIS: [levels]}   every combination of the levels (a full factorial)
        conditions:  [{AXIS: level}]    each one condition, its axes at once

    Resolved once, where the flags are read: the run records the spec, so its shards,
    resume and merge never read the file again."""
    flag = f"--eval.sweep={path}"
    data = _read_table(path, flag)
    if not isinstance(data, dict) or not data or set(data) - set(SWEEP_KEYS):
        extra = sorted(set(data) - set(SWEEP_KEYS)) if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"{flag}: expected a table with {', '.join(SWEEP_KEYS)}; got {extra or 'an empty one'}")

    def levels_of(section: str, name: str, value: Any) -> list[str]:
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise ConfigError(f"{flag}: {section}.{name} = {value!r}; expected a number or a list of numbers")
        return [str(v) for v in values]

    def table(section: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ConfigError(f"{flag}: {section} = {value!r}; expected a table of AXIS = levels")
        return value

    parts = [f"{name}={','.join(levels_of('axes', name, v))}" for name, v in table("axes", data.get("axes", {})).items()]
    grid = {name: levels_of("grid", name, v) for name, v in table("grid", data.get("grid", {})).items()}
    parts += ["&".join(f"{n}={v}" for n, v in zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]
    listed = data.get("conditions", [])
    if not isinstance(listed, list):
        raise ConfigError(f"{flag}: conditions = {listed!r}; expected a list of tables AXIS = level")
    for i, cond in enumerate(listed):
        parts.append("&".join(f"{n}={levels_of(f'conditions[{i}]', n, v)[0]}" for n, v in table(f"conditions[{i}]", cond).items()))
    spec = ";".join(p for p in parts if p)
    check_sweep(parse(spec, flag), spec, flag)  # every axis and level checked here, named with the file
    return spec


@functools.cache
def condition(cid: str) -> Condition:
    """The condition whose id is `cid` (as a unit carries it)."""
    if not cid:
        return CONTROL
    levels = {}
    for part in cid.split("&"):
        name, _, value = part.partition("=")
        levels[name] = AXES[name].level(value, "condition")
    return Condition.of(levels)


@functools.cache
def paraphrase_table(spec: str) -> dict[str, tuple[str, ...]]:
    """--eval.paraphrases as the run holds it (JSON: a task's name or instruction -> its
    paraphrases), checked: a one-line ConfigError naming the flag for anything else."""
    flag = "--eval.paraphrases"
    try:
        data = json.loads(spec)
    except ValueError as err:
        raise ConfigError(f"{flag}: not valid JSON ({err})") from None
    return _paraphrases(data, flag)


def _paraphrases(data: Any, flag: str) -> dict[str, tuple[str, ...]]:
    """`data` (a JSON or TOML table) as a paraphrase table, or a one-line ConfigError naming
    `flag` and the first key whose value is not a list of non-empty strings (TOML also reads
    dates, times and nested tables, which no paraphrase is)."""
    expected = ("expected a table of a task's name or instruction -> a list of non-empty paraphrases (strings), "
                'e.g. {"pick up the cup": ["grab the cup", "lift the mug"]}')
    if not isinstance(data, dict):
        raise ConfigError(f"{flag}: got {type(data).__name__}; {expected}")
    for key, value in data.items():
        if not (isinstance(value, list) and value and all(isinstance(x, str) and x.strip() for x in value)):
            kinds = sorted({type(x).__name__ for x in value}) if isinstance(value, list) else [type(value).__name__]
            raise ConfigError(f"{flag}: {key!r} holds {value!r} ({', '.join(kinds) or 'empty'}); {expected}")
    return {str(k): tuple(v) for k, v in data.items()}


def read_paraphrases(value: str) -> str:
    """--eval.paraphrases=FILE (JSON, or TOML on Python 3.11+) or inline JSON -> the JSON the
    run records (read once, like --eval.sweep)."""
    if value.lstrip().startswith("{"):
        table = paraphrase_table(value)
    else:
        flag = f"--eval.paraphrases={value}"
        table = _paraphrases(_read_table(value, flag), flag)  # checked before it becomes JSON
    return json.dumps(table, sort_keys=True)


def instruction(cond: Condition, table_spec: str, task: str, description: str) -> str | None:
    """The instruction condition `cond` gives the episode of `task` (None: the task's own)."""
    k = int(cond.get("language.paraphrase"))
    if not k:
        return None
    table = paraphrase_table(table_spec) if table_spec else {}
    found = table.get(task) or table.get(description)
    if found is None or len(found) < k:
        have = f"{len(found)} paraphrases" if found else "no paraphrases"
        raise ConfigError(f"--eval.perturb: language.paraphrase={k} needs at least {k} paraphrases of task {task!r} "
                          f"({description!r}) in --eval.paraphrases; it has {have}")
    return found[k - 1]


def given_instruction(cid: str, table_spec: str, task: str, description: str) -> str:
    """The instruction an episode of `task` is given under condition `cid`: "" under
    language.drop, the paraphrase under language.paraphrase, else the task's `description`."""
    cond = condition(cid)
    if cond.get("language.drop"):
        return ""
    found = instruction(cond, table_spec, task, description)
    return description if found is None else found


def _stream(seed: int, axis: str, level: float, step: int, camera: str = "") -> np.random.Generator:
    """The draws of `axis` at `level` at `step` of the episode with `seed` (on `camera`).

    Keyed by the axis's own "axis=level" (`axis_id`), not by the whole condition, so conditions
    that share the level share the draws; a one-axis condition's id is that key, so its draws
    are those it had when the key was the condition's id."""
    stream = f"{axis}/{camera}" if camera else axis
    return np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(axis_id(axis, level).encode()),
                                  zlib.crc32(stream.encode()), step])


def reset_stream(seed: int, cid: str, axis: str) -> np.random.Generator:
    """The draws of native `axis` at the reset of the episode with `seed` under condition `cid`
    (of its level there: the same under every condition that has it)."""
    return _stream(seed, axis, condition(cid).get(axis), 0)


class Sensor:
    """A condition's sensor axes (state.noise, image.*): what the robot's sensors give at step
    `step` of the episode with `seed`, from the env's features of one row. A function of
    (condition, seed, step, row): the policy's view (`Perturber.inputs`) and the recorded
    frame (`episode.tracker.Frames`) are the same draws."""

    def __init__(self, cond: Condition, seed: int) -> None:
        self.seed = seed
        self.state_noise = cond.get("state.noise")
        self.image = cond.image_levels

    @classmethod
    def of(cls, cid: str, seed: int) -> Sensor | None:
        """The sensor of condition `cid`, None where it degrades nothing (the control's)."""
        sensor = cls(condition(cid), seed)
        return sensor if sensor.state_noise or sensor.image else None

    def __call__(self, row: Mapping[str, Any], step: int) -> dict[str, Any]:
        out = dict(row)
        if self.state_noise:
            rng = _stream(self.seed, "state.noise", self.state_noise, step)
            for key in STATE_KEYS:  # in this order, so a key's draws never depend on another's presence
                if key in out:
                    state = np.asarray(out[key])
                    noise = rng.normal(0.0, self.state_noise, state.shape)
                    out[key] = (state + noise).astype(state.dtype, copy=False)
        if self.image:
            for key in sorted(k for k in out if is_image_key(k)):  # sorted: a camera's draws never depend on another's
                out[key] = perturb_image(np.asarray(out[key]), self.image, self.seed, key, step)
        return out


class Perturber:
    """One episode's condition, applied row by row where the policy meets the env.

    `inputs` gives the row the policy sees at this step (nothing is kept: a call that fails
    and is made again sees the same), `outputs` the action the env gets; then `advance`
    commits the step."""

    def __init__(self, cond: Condition, seed: int, action_bounds: tuple[np.ndarray, np.ndarray] | None,
                 instruction: str | None = None) -> None:
        self.seed = seed
        self.bounds = action_bounds
        self.latency = int(cond.get("action.latency"))
        self.sensor = Sensor(cond, seed)
        self.action_noise = cond.get("action.noise")
        self.drop_language = bool(cond.get("language.drop"))
        self.instruction = instruction  # language.paraphrase: the one the policy gets instead
        self.step = 0
        self.history: deque[Mapping[str, Any]] = deque(maxlen=self.latency)

    def inputs(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The features the policy sees at this step, `row` being the env's (LeRobot keys, one row)."""
        # the history holds the last k rows: its first is the row of k steps before (or the
        # episode's first, while fewer than k steps have passed)
        return self.sensor(self.history[0] if self.history else row, self.step)

    def prompt(self, text: str) -> str:
        if self.drop_language:
            return ""
        return text if self.instruction is None else self.instruction

    def outputs(self, action: np.ndarray) -> np.ndarray:
        if not self.action_noise:
            return action
        rng = _stream(self.seed, "action.noise", self.action_noise, self.step)
        noisy = action + rng.normal(0.0, self.action_noise, action.shape)
        if self.bounds is not None:
            noisy = np.clip(noisy, *self.bounds)
        return noisy.astype(action.dtype, copy=False)

    def advance(self, row: Mapping[str, Any]) -> None:
        """The step was taken; `row` (the env's features of it) joins the history."""
        if self.latency:
            self.history.append({k: np.array(v, copy=True) for k, v in row.items()})
        self.step += 1


def is_image_key(key: str) -> bool:
    return key == "observation.image" or key.startswith("observation.images.")


def perturb_image(img: np.ndarray, levels: Mapping[str, float], seed: int, camera: str, step: int) -> np.ndarray:
    """One camera's frame (uint8 HWC, or float CHW in [0, 1]) under the image axes `levels`,
    in the layout and dtype it came in. What is drawn per episode (a shift's direction, a
    patch's place) comes from the episode's stream of the axis's level at step 0; noise from
    this step's."""
    chw = img.dtype != np.uint8 and img.ndim == 3 and img.shape[0] in (1, 3, 4) and img.shape[-1] not in (1, 3, 4)
    x = img.transpose(1, 2, 0) if chw else img
    x = x.astype(np.float32) / (255.0 if img.dtype == np.uint8 else 1.0)
    if x.ndim == 2:
        x = x[:, :, None]

    def episode(axis: str) -> np.random.Generator:  # what stays put for the whole episode
        return _stream(seed, axis, levels[axis], 0, camera)

    if "image.shift" in levels:
        x = _shift(x, levels["image.shift"], episode("image.shift"))
    if "image.occlusion" in levels:
        x = _occlude(x, levels["image.occlusion"], episode("image.occlusion"))
    if "image.brightness" in levels:
        x = x * levels["image.brightness"]
    if "image.contrast" in levels:
        grey = float(x.mean())
        x = (x - grey) * levels["image.contrast"] + grey
    if "image.blur" in levels:
        from scipy.ndimage import gaussian_filter  # lazy: scipy's import is ~0.2 s, paid by blurred sweeps only

        x = gaussian_filter(x, sigma=(levels["image.blur"], levels["image.blur"], 0), mode="nearest")
    if "image.noise" in levels:
        rng = _stream(seed, "image.noise", levels["image.noise"], step, camera)
        x = x + rng.normal(0.0, levels["image.noise"], x.shape).astype(np.float32)
    x = np.clip(x, 0.0, 1.0)
    if "image.jpeg" in levels:
        x = _jpeg(x, int(levels["image.jpeg"]))
    out = np.rint(x * 255.0).astype(np.uint8) if img.dtype == np.uint8 else x.astype(img.dtype, copy=False)
    if img.ndim == 2:
        out = out[:, :, 0]
    return np.ascontiguousarray(out.transpose(2, 0, 1)) if chw else out


def _shift(x: np.ndarray, level: float, rng: np.random.Generator) -> np.ndarray:
    """The frame `x` (HWC) moved by `level` of its height and width in a direction drawn from
    `rng`, black where nothing moved in."""
    h, w = x.shape[:2]
    angle = rng.uniform(0.0, 2 * np.pi)
    dy, dx = round(level * h * np.sin(angle)), round(level * w * np.cos(angle))
    moved = np.zeros_like(x)
    src = x[max(0, -dy): h - max(0, dy), max(0, -dx): w - max(0, dx)]
    moved[max(0, dy): max(0, dy) + src.shape[0], max(0, dx): max(0, dx) + src.shape[1]] = src
    return moved


def _occlude(x: np.ndarray, level: float, rng: np.random.Generator) -> np.ndarray:
    """A copy of the frame `x` (HWC) with a grey patch covering `level` of its area, the patch's
    place drawn from `rng`."""
    h, w = x.shape[:2]
    side = np.sqrt(level)
    ph, pw = round(side * h), round(side * w)
    top, left = rng.integers(0, h - ph + 1), rng.integers(0, w - pw + 1)
    x = x.copy()
    x[top: top + ph, left: left + pw] = 0.5
    return x


def preview(cid: str, frame: np.ndarray, seed: int, camera: str = "observation.image") -> np.ndarray:
    """`frame` (uint8 HWC) as condition `cid`'s image axes make the first frame of the episode
    with `seed` look to the policy (unchanged when the condition has none): the report's still."""
    levels = condition(cid).image_levels
    return perturb_image(frame, levels, seed, camera, 0) if levels else frame


def _jpeg(x: np.ndarray, quality: int) -> np.ndarray:
    """`x` (float HWC in [0, 1]) compressed to JPEG at `quality` and decoded."""
    from PIL import Image  # lazy: matplotlib's dependency, loaded by JPEG sweeps only

    pixels = np.rint(x * 255.0).astype(np.uint8)
    grey = pixels.shape[2] == 1
    rgb = pixels[:, :, 0] if grey else pixels[:, :, :3]
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
    decoded = np.asarray(Image.open(io.BytesIO(buf.getvalue()))).astype(np.float32) / 255.0
    decoded = decoded[:, :, None] if grey else decoded
    if pixels.shape[2] == 4:  # an alpha channel goes through untouched
        decoded = np.concatenate([decoded, x[:, :, 3:]], axis=2)
    return decoded


def check_benchmark(conditions: list[Condition], features: Mapping[str, Any], env_type: str, action_space: Any,
                    native_axes: Collection[str] = ()) -> None:
    """Refuse, before any episode, an axis the benchmark has nothing for (`native_axes`: the
    native ones its envs apply)."""
    for cond in conditions:
        action_bounds(cond, action_space, env_type)
        for name, _ in cond.levels:
            if AXES[name].native and name not in native_axes:
                raise ConfigError(f"--eval.perturb: {name} is applied inside the simulator, which --env.type={env_type} "
                                  f"does not do; benchmarks that apply it: {', '.join(AXES[name].native)}")
            what = "a camera image (observation.image, observation.images.*)" if name in IMAGE_AXES else " or ".join(STATE_KEYS)
            need = NEEDS.get(name) or (has_image if name in IMAGE_AXES else None)
            if need is not None and not need(features):
                raise ConfigError(
                    f"--eval.perturb: {name} acts on {what}, which --env.type={env_type} does not "
                    f"give (its observation: {', '.join(k for k in sorted(features) if k != 'action') or 'none'})"
                )


def action_bounds(cond: Condition, action_space: Any, env_type: str) -> tuple[Any, Any] | None:
    """The (low, high) that `cond`'s noisy actions are clipped to; None for actions that are
    not continuous (a Box's), where action.noise is refused: before any episode
    (`check_benchmark`), and again where a condition's episode starts (`StepContext`, for a
    caller that did not check)."""
    if hasattr(action_space, "low") and hasattr(action_space, "high"):
        return action_space.low, action_space.high
    if cond.get("action.noise"):
        raise ConfigError(f"--eval.perturb: action.noise adds Gaussian noise to continuous actions; the actions "
                          f"of --env.type={env_type} are {action_space}")
    return None


#: what state.noise perturbs, where the benchmark gives it
STATE_KEYS = ("observation.state", "observation.environment_state")
NEEDS: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "state.noise": lambda features: any(k in features for k in STATE_KEYS),
}


def has_image(features: Mapping[str, Any]) -> bool:
    return any(is_image_key(k) for k in features)
