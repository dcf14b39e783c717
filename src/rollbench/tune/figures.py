"""What `rollbench tune` measured, each figure marked measured or estimated.

A probe result is plain data (JSON in, JSON out), so the decision logic in `model.py` can
be tested on recorded probes of machines we do not have (several GPUs, a big CPU box).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1


@dataclass(frozen=True)
class Figure:
    """One number and how we know it: `measured` here, or `estimated` (and why)."""

    value: float | None
    source: str = "measured"  # measured | estimated
    note: str = ""

    @property
    def v(self) -> float:
        return float(self.value or 0.0)

    def show(self, unit: str = "", fmt: str = "{:.3g}") -> str:
        text = "n/a" if self.value is None else fmt.format(self.value) + unit
        tag = self.source if not self.note else f"{self.source}: {self.note}"
        return f"{text} [{tag}]"


def measured(value: float | None, note: str = "") -> Figure:
    return Figure(None if value is None else float(value), "measured", note)


def estimated(value: float | None, why: str) -> Figure:
    return Figure(None if value is None else float(value), "estimated", why)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    total_mib: int | None
    free_mib: int | None


@dataclass(frozen=True)
class MachineProbe:
    cores: Figure
    mem_available_bytes: Figure
    gpus: tuple[GpuInfo, ...] = ()


@dataclass(frozen=True)
class EnvProbe:
    """One benchmark's costs on one CPU core, from real worker-like processes."""

    backend: str  # MUJOCO_GL the probe ran with
    worker_start_s: Figure  # process start -> rollbench and the benchmark imported
    first_build_s: Figure  # a process's first env: make + first reset (imports the simulator)
    build_s: Figure  # a further env in the same process
    reset_ms: Figure
    step_ms_1: Figure  # one process stepping alone
    step_ms_all: Figure  # per process, with one process per core stepping at once
    render_ms: Figure  # env.render() for one video frame
    policy_ms_worker: Figure  # the policy inside a worker, per step of one slot (worker placement)
    episode_steps: Figure  # mean episode length under this policy (or the step limit)
    episode_steps_constant: bool  # every episode runs the same number of steps
    worker_rss_bytes: Figure
    roundtrip_ms: Figure  # a driver <-> worker pipe round trip
    max_steps: int
    driver_setup_s: Figure = Figure(0.0, "estimated", "not measured")  # the driver's per-run set-up (obs layouts)
    other_backend: str | None = None  # a second render backend tried, and its frame time
    other_render_ms: Figure | None = None
    parallel: int = 1  # processes stepping at once for `step_ms_all` / `loop_ms_all`
    #: a worker's whole loop per step (the policy in worker placement, the env step, the
    #: episode's bookkeeping, resets amortised), one process alone and `parallel` at once;
    #: None in probes of older versions
    loop_ms_1: Figure | None = None
    loop_ms_all: Figure | None = None
    windows: int = 0  # measurement windows per regime (0: the warm-up's figures only)
    window_s: float = 0.0


@dataclass(frozen=True)
class InferencePoint:
    batch: int
    full_ms: float  # a call that runs the network on every row
    queued_ms: float  # a call served from the rows' action queues (== full_ms without chunking)
    cpu_util: float  # process CPU seconds / wall seconds during the full calls
    peak_bytes: int | None = None  # accelerator memory above the weights (GPU only)


@dataclass(frozen=True)
class PolicyProbe:
    type: str
    device: str
    placement: str  # worker | driver: where `--policy.placement=auto` puts it
    per_slot_state: bool
    load_s: Figure
    param_bytes: Figure
    rss_bytes: Figure
    steps_per_inference: Figure  # steps served per network call (a chunk's n_action_steps)
    inference: tuple[InferencePoint, ...] = ()
    amp_inference: tuple[InferencePoint, ...] = ()
    #: CPU policies: the same with one torch thread (what the driver runs with when the
    #: workers take the other cores; see scheduler/continuous.py `_torch_threads`)
    inference_1t: tuple[InferencePoint, ...] = ()
    threads: int = 1  # torch's intra-op threads during `inference`


@dataclass(frozen=True)
class RunShape:
    """What the evaluation asks for (from its flags): how much work, of what kind."""

    n_units: int
    n_tasks: int
    n_episodes: int  # per task
    videos_per_task: int
    device: str
    mode: str = "auto"  # the user's --eval.mode
    same_process: bool = False  # --eval.isolation=none: lockstep's envs step in the run's process
    placement: str = "auto"  # the user's --policy.placement
    render_device: str = "auto"
    renders_obs: bool = False  # observations are images: every step renders


@dataclass(frozen=True)
class Probe:
    machine: MachineProbe
    env: EnvProbe
    policy: PolicyProbe
    run: RunShape
    schema: int = SCHEMA
    took_s: float = 0.0
    host: str = ""
    budget_s: float = 0.0  # what the probe was allowed to spend
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        return _build(cls, data)  # type: ignore[no-any-return]


def _build(tp: Any, data: Any) -> Any:
    """Rebuild nested frozen dataclasses from `asdict` output."""
    if data is None:
        return None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _build(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data})
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and args:
        return tuple(_build(args[0], x) for x in data)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _build(inner[0], data)
    return data
