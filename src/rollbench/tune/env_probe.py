"""Measure the env in worker-like processes, the way the run will step it.

    start   P processes at once (P = the workers the run will most likely start), with the
            scheduler's environment (forkserver, MUJOCO_GL, one BLAS thread)
    warm    each builds the envs of its share of the tasks and runs one episode of each:
            start-up, builds, resets, episode lengths, video frames (warm-up, not timed
            for the rates)
    windows short windows, alternately all P processes stepping at once ("together") and one
            alone ("solo", each process in turn), so both regimes see the same machine;
            in each, a process runs a worker's loop (the policy when it runs in the
            workers, the env step, the episode's bookkeeping, the reset into its next
            episode) and reports, per task, steps, env-step time and loop time
    figures per task the trimmed mean over the windows, mixed by the tasks' episode
            lengths (every task runs the same number of episodes)

Many short windows and a trimmed mean, not one long window and its mean: on a machine
others share, a window that another process preempted is an outlier, and the P processes
stepping together measure the contention the run's workers will see (a core that another
process keeps busy included).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollbench.config.run import RunConfig
from rollbench.episode.video import grab_frame
from rollbench.plan import EpisodeUnit
from rollbench.rendering import apply_backend
from rollbench.tune.figures import EnvProbe, Figure, estimated, measured
from rollbench.tune.probe_process import (
    FRAMES,
    WARM_SKIP_STEPS,
    EnvProbeSpec,
    ProbeError,
    child_main,
    receive,
    start_process,
)
from rollbench.tune.stats import median, relative_spread, trimmed_mean

log = logging.getLogger(__name__)

#: windows per regime when the budget allows, and their length bounds (seconds)
TARGET_WINDOWS = 12
MIN_WINDOW_S = 0.1
MAX_WINDOW_S = 0.5
#: tasks sampled at most (each process builds its share of them)
MAX_TASKS = 4


# -- in the parent -------------------------------------------------------------------


def sample_tasks(tasks: list[str], n: int) -> list[str]:
    """`n` of `tasks`, spread evenly over the list (all of them when there are few)."""
    if len(tasks) <= n:
        return list(tasks)
    return [tasks[round(i * (len(tasks) - 1) / (n - 1))] for i in range(n)] if n > 1 else tasks[:1]


def deal(tasks: list[str], processes: int) -> list[list[str]]:
    """Each process's tasks: its share of them, as task affinity gives the run's workers; with
    more processes than tasks, several step the same task."""
    if len(tasks) >= processes:
        return [tasks[i::processes] for i in range(processes)]
    return [[tasks[i % len(tasks)]] for i in range(processes)]


@dataclass(frozen=True)
class WindowPlan:
    n: int  # windows per regime (0: the warm-up's figures only)
    seconds: float


def plan_windows(budget_s: float, regimes: int) -> WindowPlan:
    """As many windows as the budget pays for, up to TARGET_WINDOWS a regime, each between
    MIN_WINDOW_S and MAX_WINDOW_S long."""
    if budget_s < regimes * MIN_WINDOW_S:
        return WindowPlan(0, 0.0)
    seconds = min(MAX_WINDOW_S, max(MIN_WINDOW_S, budget_s / (regimes * TARGET_WINDOWS)))
    return WindowPlan(min(TARGET_WINDOWS, int(budget_s // (regimes * seconds))), seconds)


#: after the warm-up: (the figures so far, seconds spent) -> seconds the windows may take
WindowBudget = Callable[[EnvProbe, float], float]


class _Samples:
    """Per regime and task: ms per env step, ms per loop iteration, policy ms per step."""

    def __init__(self) -> None:
        self.step: dict[str, dict[str, list[float]]] = {"solo": defaultdict(list), "together": defaultdict(list)}
        self.loop: dict[str, dict[str, list[float]]] = {"solo": defaultdict(list), "together": defaultdict(list)}
        self.policy: dict[str, list[float]] = {"solo": [], "together": []}

    def add(self, regime: str, stats: dict[str, list[float]]) -> None:
        for task, (n, step_s, loop_s, pol_s) in stats.items():
            if n <= 0:
                continue
            self.step[regime][task].append(1000.0 * step_s / n)
            self.loop[regime][task].append(1000.0 * loop_s / n)
            self.policy[regime].append(1000.0 * pol_s / n)


def _mix(per_task: dict[str, float], weights: dict[str, float]) -> float:
    """Per-step cost over the run's mix of steps: each task weighted by its episode length."""
    total = sum(weights[t] for t in per_task)
    return sum(per_task[t] * weights[t] for t in per_task) / max(total, 1e-9)


def _regimes(samples: dict[str, dict[str, list[float]]], tasks: list[str]) -> tuple[dict[str, float], dict[str, float], float]:
    """(solo per task, together per task, together / solo); a task missing from one regime
    gets the other's value scaled by the ratio of the tasks seen in both."""
    solo = {t: trimmed_mean(v) for t, v in samples["solo"].items() if v}
    together = {t: trimmed_mean(v) for t, v in samples["together"].items() if v}
    both = [t for t in tasks if t in solo and t in together]
    ratio = median([together[t] / max(solo[t], 1e-9) for t in both]) if both else 1.0
    for t in tasks:
        if t not in solo and t in together:
            solo[t] = together[t] / max(ratio, 1e-9)
        if t not in together and t in solo:
            together[t] = solo[t] * ratio
    return solo, together, ratio


@dataclass(frozen=True)
class _Setup:
    """What the probe's processes were asked to do, and what their warm-up found."""

    cfg: RunConfig
    tasks: list[str]  # the sampled tasks the processes step
    all_tasks: list[str]
    n_proc: int
    backend: str
    other_backend: str | None
    with_policy: bool
    max_steps: int
    starts: list[float]
    first_builds: list[float]
    later_builds: list[float]
    frames: list[float]


@dataclass
class _Measured:
    samples: _Samples
    lengths: dict[str, list[int]]
    resets: list[float]
    plan: WindowPlan
    rss: int = 0
    pings: list[float] = field(default_factory=list)
    other: Figure | None = None


def probe_env(cfg: RunConfig, units: list[EpisodeUnit], budget_s: float, backend: str, with_policy: bool,
              render: bool, n_parallel: int, other_backend: str | None,
              window_budget: WindowBudget | None = None) -> tuple[EnvProbe, Any]:
    """Measure the env within `budget_s` (the windows within `window_budget`'s answer when
    given); returns the probe and one observation (for the policy's probe)."""
    t_start = time.monotonic()
    by_task: dict[str, list[EpisodeUnit]] = {}
    for u in units:
        by_task.setdefault(u.task, []).append(u)
    all_tasks = list(by_task)
    n_proc = max(1, n_parallel)
    tasks = sample_tasks(all_tasks, max(MAX_TASKS, min(n_proc, len(all_tasks))))
    shares = deal(tasks, n_proc)
    warm_s = max(0.2, 0.3 * budget_s / max(len(s) for s in shares))
    started_at = time.time()
    procs = [
        start_process(child_main, EnvProbeSpec(cfg, i, tuple(tuple(by_task[t]) for t in share), warm_s, backend,
                                           with_policy, render, started_at))
        for i, share in enumerate(shares)
    ]
    try:
        # the first process sends an observation before its warm-up's figures
        starts = [receive(conn, proc, 180.0, "env")[1] for proc, conn in procs]
        obs = receive(procs[0][1], procs[0][0], warm_s * len(shares[0]) + 180.0, "env")[1]
        warms = [receive(conn, proc, warm_s * len(share) + 180.0, "env")[1]
                 for (proc, conn), share in zip(procs, shares, strict=True)]
        setup = _Setup(
            cfg, tasks, all_tasks, n_proc, backend, other_backend, with_policy,
            max(cfg.env.effective_max_steps(t) for t in all_tasks), starts,
            [w["builds"][0] for w in warms], [b for w in warms for b in w["builds"][1:]],
            [f for w in warms for f in w["frames"]],
        )
        return _windows(setup, procs, warms, budget_s, window_budget, t_start), obs
    finally:
        for proc, _ in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def _windows(setup: _Setup, procs: list[tuple[Any, Any]], warms: list[dict[str, Any]], budget_s: float,
             window_budget: WindowBudget | None, t_start: float) -> EnvProbe:
    """After the warm-up: the windows the budget allows, pings, and the processes' totals."""
    warm = _warm_measured(setup, warms)
    spent = time.monotonic() - t_start
    # the warm-up's figures give the window budget a refined estimate of the run
    wb = window_budget(_figures(setup, warm), spent) if window_budget is not None else budget_s - spent
    regimes = ["together", "solo"] if setup.n_proc > 1 else ["solo"]
    plan = plan_windows(max(0.0, wb), len(regimes))
    log.debug("tune: env warm-up took %.2f s; %d windows of %.2f s per regime (%.2f s allowed)", spent, plan.n,
              plan.seconds, wb)
    # windows measured: the warm-up's steps no longer count
    samples = _window_samples(procs, plan, regimes) if plan.n else warm.samples
    done = _Measured(samples, defaultdict(list), [], plan)
    done.pings = _pings(procs[0])
    _collect_totals(procs, done)
    left = budget_s - (time.monotonic() - t_start)
    if setup.other_backend and setup.frames and left > 3.0:
        done.other = other_render(setup.cfg, setup.tasks[0], setup.other_backend, min(2.0, left / 2))
    return _figures(setup, done)


def _warm_measured(setup: _Setup, warms: list[dict[str, Any]]) -> _Measured:
    """What the processes' warm-up measured: its samples, episode lengths and resets."""
    warm = _Measured(_Samples(), defaultdict(list), [r for w in warms for r in w["resets"]], WindowPlan(0, 0.0))
    regime_at_warm = "together" if setup.n_proc > 1 else "solo"  # every process warms up at once
    for w in warms:
        warm.samples.add(regime_at_warm, w["stats"])
        for task, ls in w["lengths"].items():
            warm.lengths[task].extend(ls)
    return warm


def _window_samples(procs: list[tuple[Any, Any]], plan: WindowPlan, regimes: list[str]) -> _Samples:
    """The samples of `plan.n` rounds of windows, one window per regime a round; "solo" takes
    each process in turn."""
    samples = _Samples()
    for k in range(plan.n):
        for regime in regimes:
            chosen = procs if regime == "together" else [procs[k % len(procs)]]
            for _, conn in chosen:
                conn.send(("window", plan.seconds))
            for proc, conn in chosen:
                samples.add(regime, receive(conn, proc, plan.seconds + 120.0, "env")[1])
    return samples


def _pings(proc_conn: tuple[Any, Any]) -> list[float]:
    """The seconds of 50 pipe round trips to one process."""
    proc, conn = proc_conn
    pings: list[float] = []
    for i in range(50):
        t0 = time.perf_counter()
        conn.send(("ping", i))
        receive(conn, proc, 30.0, "env")
        pings.append(time.perf_counter() - t0)
    return pings


def _collect_totals(procs: list[tuple[Any, Any]], done: _Measured) -> None:
    """Tells every process it is done, and adds its episode lengths, resets and peak RSS to
    `done`."""
    for proc, conn in procs:
        conn.send(("done",))
        bye = receive(conn, proc, 30.0, "env")[1]
        for task, ls in bye["lengths"].items():
            done.lengths[task].extend(ls)
        done.resets.extend(bye["resets"])
        done.rss = max(done.rss, int(bye["rss"]))


def _figures(setup: _Setup, m: _Measured) -> EnvProbe:
    """The probe's figures from what the warm-up, or the windows after it, measured."""
    lengths = m.lengths if setup.with_policy else {}  # random actions say nothing of the policy's episodes
    # episode lengths: per task, then every task equally (each runs n_episodes)
    per_task_len = {t: float(sum(v) / len(v)) for t, v in lengths.items() if v}
    weights = {t: per_task_len.get(t, float(setup.cfg.env.effective_max_steps(t))) for t in setup.tasks}
    solo_fig, tog_fig, loop1_fig, loop_all_fig = _rate_figures(setup, m, weights)
    ep_steps, constant = _episode_steps(setup, lengths, per_task_len, weights)
    policy_ms = m.samples.policy["solo"] or m.samples.policy["together"]
    return EnvProbe(
        backend=setup.backend,
        worker_start_s=measured(median(setup.starts), f"{setup.n_proc} processes started at once: start to ready "
                                                      "(imports, and the policy when it runs there)"),
        first_build_s=measured(median(setup.first_builds), "make + first reset, simulator import included"),
        build_s=measured(median(setup.later_builds), f"{len(setup.later_builds)} more envs") if setup.later_builds
        else estimated(median(setup.first_builds) / 2, "only one env built per process; half the first build"),
        reset_ms=measured(1000.0 * median(m.resets), f"{len(m.resets)} resets") if m.resets
        else estimated(0.0, "not measured yet"),
        step_ms_1=solo_fig,
        step_ms_all=tog_fig,
        render_ms=measured(1000.0 * median(setup.frames), f"{len(setup.frames)} frames") if setup.frames
        else measured(0.0, "no video frames requested"),
        policy_ms_worker=measured(trimmed_mean(policy_ms), "per step, batch 1, one thread") if setup.with_policy and policy_ms
        else measured(0.0, "the policy does not run in the workers"),
        episode_steps=ep_steps,
        episode_steps_constant=constant,
        worker_rss_bytes=measured(m.rss, "peak RSS of the probe processes") if m.rss else estimated(0.0, "not read yet"),
        roundtrip_ms=measured(1000.0 * median(m.pings), "pipe round trip, 50 pings") if m.pings
        else estimated(0.05, "not measured yet"),
        max_steps=setup.max_steps,
        other_backend=setup.other_backend if m.other is not None else None,
        other_render_ms=m.other,
        parallel=setup.n_proc,
        loop_ms_1=loop1_fig,
        loop_ms_all=loop_all_fig,
        windows=m.plan.n,
        window_s=m.plan.seconds,
    )


def _rate_figures(setup: _Setup, m: _Measured, weights: dict[str, float]) -> tuple[Figure, Figure, Figure, Figure]:
    """The env step's and the worker loop's ms per step, tasks mixed by `weights`: (step alone,
    step with every process at once, loop alone, loop with every process at once)."""
    s, plan, n_proc, tasks = m.samples, m.plan, setup.n_proc, setup.tasks
    step_solo, step_tog, ratio = _regimes(s.step, tasks)
    loop_solo, loop_tog, loop_ratio = _regimes(s.loop, tasks)
    seen = [t for t in tasks if t in step_solo]
    if not seen:
        raise ProbeError("tune: the env probe took no steps (a budget too small?)")
    w = {t: weights[t] for t in seen}
    step1, step_all = _mix({t: step_solo[t] for t in seen}, w), _mix({t: step_tog[t] for t in seen}, w)
    loop1, loop_all = _mix({t: loop_solo[t] for t in seen}, w), _mix({t: loop_tog[t] for t in seen}, w)
    if not plan.n and m.resets:  # the warm-up's loop did not reset: amortise the resets it timed
        per_step_reset = 1000.0 * median(m.resets) / max(1.0, sum(w.values()) / len(w))
        loop1, loop_all = loop1 + per_step_reset, loop_all + per_step_reset
    of_tasks = f"{len(seen)} of {len(setup.all_tasks)} tasks" if len(seen) < len(setup.all_tasks) else f"{len(seen)} tasks"
    if plan.n:
        how = (f"trimmed mean of {plan.n} windows of {plan.seconds:.2f} s, {of_tasks} mixed by episode length, "
               f"warm-up excluded")
        spread = relative_spread([x for v in s.loop["together" if n_proc > 1 else "solo"].values() for x in v])
        solo_fig = measured(step1, f"one process alone; {how}")
        tog_fig = measured(step_all, f"{n_proc} processes at once ({ratio:.2f}x alone, windows interleaved); "
                                     f"{how}; windows spread {spread:.0%}") if n_proc > 1 else solo_fig
        loop1_fig = measured(loop1, f"a worker's loop (policy, step, bookkeeping, resets), one process; {how}")
        loop_all_fig = measured(loop_all, f"the same, {n_proc} processes at once ({loop_ratio:.2f}x alone)") \
            if n_proc > 1 else loop1_fig
    else:
        how = f"the warm-up episodes ({of_tasks}, first {WARM_SKIP_STEPS} steps skipped); no window fitted the budget"
        loop_note = f"a worker's loop (policy, step, bookkeeping, resets amortised), {how}"
        if n_proc > 1:
            tog_fig = measured(step_all, f"{n_proc} processes at once, {how}")
            solo_fig = estimated(step1, f"not measured alone; the value with {n_proc} processes at once")
            loop_all_fig = measured(loop_all, f"{n_proc} processes at once: {loop_note}")
            loop1_fig = estimated(loop1, "not measured alone; the value with all processes at once")
        else:
            solo_fig = tog_fig = measured(step1, how)
            loop1_fig = loop_all_fig = measured(loop1, loop_note)
    return solo_fig, tog_fig, loop1_fig, loop_all_fig


def _episode_steps(setup: _Setup, lengths: dict[str, list[int]], per_task_len: dict[str, float],
                   weights: dict[str, float]) -> tuple[Figure, bool]:
    """The steps of an average episode, and whether every episode runs to the step limit."""
    tasks = setup.tasks
    if all(t in per_task_len for t in tasks) and len(tasks) == len(setup.all_tasks):
        done = [n for t in tasks for n in lengths[t]]
        ep_steps = measured(sum(per_task_len[t] for t in tasks) / len(tasks),
                            f"{len(done)} probe episodes of all {len(tasks)} tasks")
    elif per_task_len:
        ep_steps = estimated(sum(weights.values()) / len(weights),
                             f"{sum(len(v) for v in lengths.values())} probe episodes of {len(per_task_len)} tasks; "
                             f"the step limit for the others")
    else:
        why = "the policy runs in the driver, not in the probe" if not setup.with_policy else "no probe episode ended"
        ep_steps = estimated(float(setup.max_steps), f"{why}; assumes every episode runs to the step limit")
    all_lengths = [n for v in lengths.values() for n in v]
    constant = not all_lengths or (len(set(all_lengths)) == 1 and all_lengths[0] == setup.max_steps)
    return ep_steps, constant


# -- the other render backend ---------------------------------------------------------


@dataclass(frozen=True)
class RenderSpec:
    cfg: RunConfig
    task: str
    backend: str
    seconds: float


def _child_render(conn: Any, spec: RenderSpec) -> None:
    try:
        apply_backend(spec.backend)
        env = spec.cfg.env.make_task_env(spec.task)
        env.reset(seed=spec.cfg.seed)
        grab_frame(env, spec.task, spec.cfg.eval.video_size)  # context creation
        times: list[float] = []
        t_end = time.monotonic() + spec.seconds
        while time.monotonic() < t_end and len(times) < FRAMES:
            t0 = time.perf_counter()
            grab_frame(env, spec.task, spec.cfg.eval.video_size)
            times.append(time.perf_counter() - t0)
        env.close()
        conn.send(("result", 1000.0 * median(times)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def other_render(cfg: RunConfig, task: str, backend: str, seconds: float) -> Figure | None:
    proc, conn = start_process(_child_render, RenderSpec(cfg, task, backend, seconds))
    try:
        return measured(receive(conn, proc, seconds + 120.0, f"{backend} render")[1], f"MUJOCO_GL={backend}")
    except ProbeError as err:
        log.info("%s", err)
        return None
    finally:
        proc.join(timeout=10)
