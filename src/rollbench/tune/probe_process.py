"""What runs inside a probe process, and how the parent starts and hears from one.

A probe process is a worker's stand-in (env_probe.py drives P of them at once): forkserver,
`MUJOCO_GL` and one BLAS thread as the scheduler sets them; it builds its tasks' envs, runs
one episode of each (the warm-up), then steps in windows the parent asks for, running a
worker's loop: the policy when it runs in the workers, the env step, the episode's
bookkeeping, and the reset into its next episode.

    parent -> ("window", seconds) | ("ping", i) | ("done",)
    child  -> ("started", s) ("obs", obs)[first process] ("warm", {...}) then
              ("window", {task: [steps, env-step s, loop s, policy s]}) | ("pong", i) | ("bye", {...})
              | ("error", traceback)
"""

from __future__ import annotations

import os
import resource
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from rollbench import forkserver
from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext, stack_any
from rollbench.episode.tracker import EpisodeTracker
from rollbench.episode.video import grab_frame
from rollbench.errors import RollbenchError
from rollbench.plan import EpisodeUnit
from rollbench.rendering import apply_backend

#: the first steps of a fresh env are not the run's steady state (caches, lazy set-up)
WARM_SKIP_STEPS = 10
#: video frames timed per process during the warm-up
FRAMES = 8


class ProbeError(RollbenchError):
    """A probe process failed; the message carries its traceback's last line."""


@dataclass(frozen=True)
class EnvProbeSpec:
    cfg: RunConfig
    index: int
    units: tuple[tuple[EpisodeUnit, ...], ...]  # per task this process steps: its units, plan order
    warm_s: float  # the most the warm-up episode of one task may take
    backend: str
    with_policy: bool  # run the policy inside (worker placement)
    render: bool  # time video frames during the warm-up
    started_at: float  # time.time() in the parent just before the start


# -- inside a probe process ----------------------------------------------------------


class Stepper:
    """One worker slot: its tasks in turn, one env kept per task, a fresh unit each episode."""

    def __init__(self, spec: EnvProbeSpec) -> None:
        self.spec = spec
        self.bench = spec.cfg.env
        self.ctx = StepContext(self.bench, spec.cfg.policy, spec.cfg.seed)
        self.policy = self.ctx.make_policy() if spec.with_policy else None  # a worker builds its policy first
        self.envs: dict[str, Any] = {}
        self.next_unit = [0] * len(spec.units)
        self.turn = -1  # index into spec.units of the running episode's task
        self.env: Any = None
        self.obs: Any = None
        self.tracker: Any = None
        self.desc: list[str] = []
        self.lengths: dict[str, list[int]] = defaultdict(list)
        self.resets: list[float] = []

    @property
    def task(self) -> str:
        return str(self.tracker.unit.task)

    def build(self, k: int) -> float:
        """Make task k's env and reset it once (what a worker's first use of a task costs)."""
        unit = self.spec.units[k][0]
        t0 = time.perf_counter()
        env = self.bench.make_task_env(unit.task)
        env.reset(seed=unit.seed)
        took = time.perf_counter() - t0
        self.envs[unit.task] = env
        return took

    def start(self, k: int) -> None:
        """Reset task k's env into its next unit (the plan's own seeds, in order, cycling)."""
        units = self.spec.units[k]
        unit = units[self.next_unit[k] % len(units)]
        self.next_unit[k] += 1
        self.turn, self.env = k, self.envs[unit.task]
        self.tracker = EpisodeTracker.of(self.bench, unit)
        t0 = time.perf_counter()
        self.obs = self.tracker.reset(self.bench, self.env)
        self.resets.append(time.perf_counter() - t0)
        self.env.action_space.seed(unit.seed)
        if self.policy is not None:
            self.ctx.reset(self.policy, [0], [self.ctx.episode_start(unit)])
        self.desc = [self.bench.policy_task(unit.task)]

    def step(self, advance: bool = True) -> tuple[float, float, bool]:
        """One iteration of a worker's loop: (policy seconds, env-step seconds, episode ended).
        An episode that ends is reset into the next task's next unit, as a worker would
        (unless not `advance`)."""
        pol = 0.0
        if self.policy is not None:
            t0 = time.perf_counter()
            action = self.ctx.act(self.policy, stack_any([self.obs]), [0], self.desc)[0]
            pol = time.perf_counter() - t0
        else:
            action = self.env.action_space.sample()
        t0 = time.perf_counter()
        self.obs, ended = self.tracker.step(self.bench, self.env, self.obs, action)
        took = time.perf_counter() - t0
        if ended:
            self.lengths[self.task].append(self.tracker.n_steps)
            if advance:
                self.start((self.turn + 1) % len(self.spec.units))
        return pol, took, ended

    def warm_up(self) -> dict[str, Any]:
        """Build every task's env, then run each task's first episode (or `warm_s` of it);
        per task, the steps after the first WARM_SKIP_STEPS as a window would count them."""
        builds = [self.build(k) for k in range(len(self.spec.units))]
        stats: dict[str, list[float]] = {}
        frames: list[float] = []
        ended = False
        for k in range(len(self.spec.units)):
            self.start(k)
            task, steps = self.task, []  # per step: env-step s, loop s, policy s
            deadline = time.monotonic() + self.spec.warm_s
            while True:
                t = time.perf_counter()
                pol, took, ended = self.step(advance=False)
                steps.append((took, time.perf_counter() - t, pol))
                if self.spec.render and len(frames) < FRAMES and not ended:
                    t0 = time.perf_counter()
                    grab_frame(self.env, task, self.spec.cfg.eval.video_size)
                    frames.append(time.perf_counter() - t0)
                if ended or time.monotonic() > deadline:
                    break
            counted = steps[WARM_SKIP_STEPS:] or steps  # an episode shorter than the skip counts whole
            stats[task] = [len(counted), *map(sum, zip(*counted, strict=True))]
        if ended:  # the windows go on from a live episode (an unfinished one is kept)
            self.start((self.turn + 1) % len(self.spec.units))
        return {"builds": builds, "stats": stats, "frames": frames, "lengths": dict(self.lengths), "resets": self.resets}

    def window(self, seconds: float) -> dict[str, list[float]]:
        """Step for `seconds`; per task: [steps, env-step s, loop s, policy s]."""
        out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        t = time.perf_counter()
        t_end = t + seconds
        while t < t_end:
            task = self.task
            pol, took, _ = self.step()
            now = time.perf_counter()
            acc = out[task]
            acc[0] += 1
            acc[1] += took
            acc[2] += now - t  # the whole iteration: policy, step, bookkeeping, a reset when one ended
            acc[3] += pol
            t = now
        return dict(out)


def child_main(conn: Any, spec: EnvProbeSpec) -> None:
    try:
        apply_backend(spec.backend)
        stepper = Stepper(spec)
        conn.send(("started", time.time() - spec.started_at))
        warm = stepper.warm_up()
        if spec.index == 0:
            conn.send(("obs", stepper.obs))
        conn.send(("warm", warm))
        while True:
            msg = conn.recv()
            if msg[0] == "window":
                conn.send(("window", stepper.window(msg[1])))
            elif msg[0] == "ping":
                conn.send(("pong", msg[1]))
            else:
                conn.send(("bye", {
                    "lengths": dict(stepper.lengths), "resets": stepper.resets,
                    "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                }))
                return
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass


def start_process(target: Any, spec: Any) -> tuple[Any, Any]:
    ctx = forkserver.context()
    parent, child = ctx.Pipe()
    prev = os.environ.get("OMP_NUM_THREADS")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the scheduler starts its workers
    try:
        proc = ctx.Process(target=target, args=(child, spec), daemon=True, name="rollbench-tune-probe")
        proc.start()
    finally:
        if prev is None:
            os.environ.pop("OMP_NUM_THREADS", None)
    child.close()
    return proc, parent


def receive(conn: Any, proc: Any, timeout: float, what: str) -> tuple[str, Any]:
    if not conn.poll(timeout):
        proc.kill()
        raise ProbeError(f"tune: the {what} probe gave no answer within {timeout:.0f}s (a hung env?)")
    try:
        kind, payload = conn.recv()
    except EOFError:
        raise ProbeError(f"tune: the {what} probe process died (exit code {proc.exitcode})") from None
    if kind == "error":
        last = payload.strip().splitlines()[-1] if payload.strip() else "unknown error"
        raise ProbeError(f"tune: the {what} probe failed: {last}")
    return kind, payload
