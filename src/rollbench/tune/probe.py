"""Measure this machine for one evaluation: cores, memory, GPUs, env costs, inference costs.

The env is measured in real worker-like processes (forkserver, MUJOCO_GL and one BLAS
thread set as the scheduler sets them): start-up, env builds, resets, steps (alone, then
one process per core at once), video frames, and, for policies that run inside workers,
the policy's own time and the episode lengths it produces. The policy is measured in this
process, as the driver runs it: load time, weights, memory, and time per call at batch
sizes 1, 2, 4, ... until the time per row stops falling.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rollbench.config.run import RunConfig
from rollbench.errors import RollbenchError
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import Policy
from rollbench.tune.figures import (
    EnvProbe,
    Figure,
    GpuInfo,
    InferencePoint,
    MachineProbe,
    PolicyProbe,
    estimated,
    measured,
)

log = logging.getLogger(__name__)


class ProbeError(RollbenchError):
    """A probe process failed; the message carries its traceback's last line."""


# -- the machine -------------------------------------------------------------------------


def probe_machine() -> MachineProbe:
    from rollbench.scheduler.common import cpu_count

    return MachineProbe(
        cores=measured(cpu_count(), "CPUs this process may run on"),
        mem_available_bytes=_mem_available(),
        gpus=tuple(find_gpu_info()),
    )


def _mem_available() -> Figure:
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:  # a cgroup limit (containers) may be lower than the host's free memory
        raw = Path("/sys/fs/cgroup/memory.max").read_text(encoding="ascii").strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text(encoding="ascii").strip())
        if raw != "max":
            room = int(raw) - used
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    if avail is None:
        return estimated(8 * 2**30, "no /proc/meminfo here; assumed 8 GiB")
    return measured(avail, "MemAvailable, or the cgroup's room if lower")


def parse_gpu_info(text: str) -> list[GpuInfo]:
    """`nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits`."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        total = int(parts[2]) if parts[2].isdigit() else None
        free = int(parts[3]) if parts[3].isdigit() else None
        out.append(GpuInfo(int(parts[0]), parts[1], total, free))
    return out


def find_gpu_info() -> list[GpuInfo]:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=15, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    gpus = parse_gpu_info(proc.stdout)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(p.strip().isdigit() for p in visible.split(",") if p.strip()):
        allowed = {int(p) for p in visible.split(",") if p.strip()}
        gpus = [g for g in gpus if g.index in allowed]
    return gpus


# -- the env, in worker-like processes -------------------------------------------------


@dataclass(frozen=True)
class EnvProbeSpec:
    cfg: RunConfig
    units: tuple[EpisodeUnit, ...]  # what to run, in order (one episode per task first)
    budget_s: float
    backend: str
    with_policy: bool  # run the policy inside (worker placement)
    render: bool  # time env.render() for video frames
    started_at: float  # time.time() in the parent just before the start


def _child_env(conn: Any, spec: EnvProbeSpec) -> None:
    """Single probe: as a worker would, run the units' episodes until the budget is used;
    then answer the parent's pings (round-trip time) until it says 'done'."""
    try:
        conn.send(("result", _run_single(conn, spec)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        msg = conn.recv()
        if msg == "done":
            return
        conn.send(msg)


def _run_single(conn: Any, spec: EnvProbeSpec) -> dict[str, Any]:
    from rollbench.rendering import apply_backend

    apply_backend(spec.backend)
    from rollbench.rollout import EpisodeTracker, grab_frame
    from rollbench.scheduler.common import StepContext
    from rollbench.scheduler.shm import stack_any

    bench = spec.cfg.env
    ctx = StepContext(bench, spec.cfg.policy)
    policy = ctx.make_policy() if spec.with_policy else None  # a worker builds its policy first
    out: dict[str, Any] = {"start_s": time.time() - spec.started_at}
    deadline = time.monotonic() + spec.budget_s
    builds: list[float] = []
    resets: list[float] = []
    steps: list[float] = []
    policy_ms: list[float] = []
    renders: list[float] = []
    lengths: list[int] = []
    full: list[bool] = []  # did each episode end before the budget did?
    sample_obs = None
    for unit in spec.units:
        if time.monotonic() > deadline and lengths:
            break
        t0 = time.perf_counter()
        env = bench.make_task_env(unit.task)
        obs, _ = env.reset(seed=unit.seed)
        builds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        obs, _ = env.reset(seed=unit.seed)
        resets.append(time.perf_counter() - t0)
        if sample_obs is None:
            sample_obs = obs
            conn.send(("obs", obs))
        space = env.action_space
        space.seed(unit.seed)
        if policy is not None:
            policy.reset([0], [ctx.episode_start(unit)])
        tracker = EpisodeTracker(unit, bench.effective_max_steps(unit.task), bench.success)
        desc = [bench.task_description(unit.task)]
        finished = False
        while time.monotonic() < deadline or len(steps) < 5:  # a few steps even after a slow build
            if policy is not None:
                t0 = time.perf_counter()
                action = ctx.act(policy, stack_any([obs]), [0], desc)[0]
                policy_ms.append(time.perf_counter() - t0)
            else:
                action = space.sample()
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            steps.append(time.perf_counter() - t0)
            if spec.render and len(renders) < 8:
                t0 = time.perf_counter()
                grab_frame(env, unit.task)
                renders.append(time.perf_counter() - t0)
            if tracker.update(float(reward), terminated, truncated, info):
                finished = True
                break
        lengths.append(tracker.n_steps)
        full.append(finished)
        env.close()
    if policy is not None:
        policy.close()
    out.update(
        builds=builds, resets=resets, steps=steps, policy_ms=policy_ms, renders=renders,
        lengths=lengths, finished=full, rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )
    return out


def _child_parallel(conn: Any, spec: EnvProbeSpec) -> None:
    """Parallel probe: build one env, wait for 'go', step it for the given seconds."""
    try:
        from rollbench.rendering import apply_backend

        apply_backend(spec.backend)
        unit = spec.units[0]
        env = spec.cfg.env.make_task_env(unit.task)
        env.reset(seed=unit.seed)
        space = env.action_space
        space.seed(unit.seed)
        conn.send(("ready", None))
        seconds = conn.recv()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            _, _, terminated, truncated, _ = env.step(space.sample())
            n += 1
            if terminated or truncated:
                env.reset(seed=unit.seed)
        took = time.perf_counter() - t0
        env.close()
        conn.send(("result", {"ms_per_step": 1000.0 * took / max(n, 1), "steps": n}))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _mpctx() -> Any:
    return mp.get_context("forkserver" if sys.platform.startswith("linux") else "spawn")


def _start(target: Any, spec: EnvProbeSpec) -> tuple[Any, Any]:
    ctx = _mpctx()
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


def _recv(conn: Any, proc: Any, timeout: float, what: str) -> tuple[str, Any]:
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


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else 0.0


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else 0.0


def probe_env(cfg: RunConfig, units: list[EpisodeUnit], budget_s: float, backend: str, with_policy: bool,
              render: bool, n_parallel: int, other_backend: str | None) -> tuple[EnvProbe, Any]:
    """Measure the env; returns the probe and one observation (for the policy's probe)."""
    # one episode of each task first (lengths differ by task), then more episodes
    by_task: dict[str, list[EpisodeUnit]] = {}
    for u in units:
        by_task.setdefault(u.task, []).append(u)
    order = [v[rank] for rank in range(max(len(v) for v in by_task.values())) for v in by_task.values() if rank < len(v)]
    single_budget = budget_s * 0.7
    spec = EnvProbeSpec(cfg, tuple(order), single_budget, backend, with_policy, render, time.time())
    proc, conn = _start(_child_env, spec)
    timeout = single_budget + 120.0
    _, obs = _recv(conn, proc, timeout, "env")
    _, res = _recv(conn, proc, timeout, "env")
    pings = []
    for i in range(50):
        t0 = time.perf_counter()
        conn.send(i)
        conn.recv()
        pings.append(time.perf_counter() - t0)
    conn.send("done")
    proc.join(timeout=30)

    # means, not medians: the wall time of a run is the sum of its steps, outliers included
    step1 = 1000.0 * _mean(res["steps"])
    step_all = measured(step1, "one core: the same as one process alone")
    if n_parallel > 1:
        first = 1000.0 * _mean(res["steps"][: max(1, res["lengths"][0])])
        together = _parallel(cfg, order[0], backend, n_parallel, max(2.0, budget_s * 0.12))
        # the parallel probe steps the first task only: scale the all-task mean by its contention
        step_all = measured(step1 * together / max(first, 1e-9),
                            f"{n_parallel} processes stepping {order[0].task} at once: {together / max(first, 1e-9):.2f}x "
                            f"its time alone")
    other = None
    if other_backend and render:
        other = _other_render(cfg, order[0], other_backend, max(2.0, budget_s * 0.1))
    lengths, finished = res["lengths"], res["finished"]
    max_steps = max(cfg.env.effective_max_steps(u.task) for u in order)
    if with_policy and any(finished):
        done = [n for n, f in zip(lengths, finished, strict=True) if f]
        tasks_seen = len({u.task for u, f in zip(order, finished, strict=False) if f})
        note = f"{len(done)} probe episodes of {tasks_seen} of {len(by_task)} tasks"
        ep_steps = measured(float(np.mean(done)), note) if tasks_seen == len(by_task) else estimated(
            float(np.mean(done)), note + "; the other tasks were not reached within the budget")
        constant = len(set(done)) == 1 and done[0] == max_steps
    else:
        why = "the policy runs in the driver, not in the probe" if not with_policy else "no probe episode ended within the budget"
        ep_steps = estimated(float(max_steps), f"{why}; assumes every episode runs to the step limit")
        constant = True
    builds = res["builds"]
    return EnvProbe(
        backend=backend,
        worker_start_s=measured(res["start_s"], "process start to ready (imports, and the policy when it runs there)"),
        first_build_s=measured(builds[0], "make + first reset, simulator import included"),
        build_s=measured(_median(builds[1:]), f"{len(builds) - 1} more envs") if len(builds) > 1
        else estimated(builds[0] / 2, "only one env built in the budget; half the first build"),
        reset_ms=measured(1000.0 * _median(res["resets"])),
        step_ms_1=measured(step1, f"mean of {len(res['steps'])} steps over {len(lengths)} episodes, one process"),
        step_ms_all=step_all,
        render_ms=measured(1000.0 * _median(res["renders"]), f"{len(res['renders'])} frames") if res["renders"]
        else measured(0.0, "no video frames requested"),
        policy_ms_worker=measured(1000.0 * _mean(res["policy_ms"]), "per step, batch 1, one thread") if res["policy_ms"]
        else measured(0.0, "the policy does not run in the workers"),
        episode_steps=ep_steps,
        episode_steps_constant=constant,
        worker_rss_bytes=measured(res["rss"], "peak RSS of the probe process"),
        roundtrip_ms=measured(1000.0 * _median(pings), "pipe round trip, 50 pings"),
        max_steps=max_steps,
        other_backend=other_backend if other is not None else None,
        other_render_ms=other,
    ), obs


def _parallel(cfg: RunConfig, unit: EpisodeUnit, backend: str, n: int, seconds: float) -> float:
    spec = EnvProbeSpec(cfg, (unit,), seconds, backend, False, False, time.time())
    procs = [_start(_child_parallel, spec) for _ in range(n)]
    try:
        for proc, conn in procs:
            _recv(conn, proc, 120.0, "parallel env")
        for _, conn in procs:
            conn.send(seconds)
        per = [_recv(conn, proc, seconds + 60.0, "parallel env")[1]["ms_per_step"] for proc, conn in procs]
    finally:
        for proc, _ in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return float(np.mean(per))


def _child_render(conn: Any, spec: EnvProbeSpec) -> None:
    try:
        from rollbench.rendering import apply_backend

        apply_backend(spec.backend)
        from rollbench.rollout import grab_frame

        unit = spec.units[0]
        env = spec.cfg.env.make_task_env(unit.task)
        env.reset(seed=unit.seed)
        grab_frame(env, unit.task)  # context creation
        times: list[float] = []
        t_end = time.monotonic() + spec.budget_s
        while time.monotonic() < t_end and len(times) < 8:
            t0 = time.perf_counter()
            grab_frame(env, unit.task)
            times.append(time.perf_counter() - t0)
        env.close()
        conn.send(("result", 1000.0 * _median(times)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _other_render(cfg: RunConfig, unit: EpisodeUnit, backend: str, seconds: float) -> Figure | None:
    spec = EnvProbeSpec(cfg, (unit,), seconds, backend, False, True, time.time())
    proc, conn = _start(_child_render, spec)
    try:
        return measured(_recv(conn, proc, seconds + 120.0, f"{backend} render")[1], f"MUJOCO_GL={backend}")
    except ProbeError as err:
        log.info("%s", err)
        return None
    finally:
        proc.join(timeout=10)


# -- the policy, in this process -------------------------------------------------------


def torch_modules(obj: Any) -> list[Any]:
    """The torch modules an adapter holds (a few attribute levels deep)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    found: list[Any] = []
    seen: set[int] = set()

    def visit(o: Any, depth: int) -> None:
        if id(o) in seen or depth > 3:
            return
        seen.add(id(o))
        if isinstance(o, torch.nn.Module):
            found.append(o)
            return
        for value in getattr(o, "__dict__", {}).values():
            visit(value, depth + 1)

    visit(obj, 0)
    return found


def param_bytes(policy: Any) -> int:
    seen: set[int] = set()
    total = 0
    for module in torch_modules(policy):
        for t in [*module.parameters(), *module.buffers()]:
            if t.data_ptr() in seen:
                continue
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def rss_now() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def probe_policy(cfg: RunConfig, policy: Policy, load_s: float, rss_before: int, obs: Any, unit: EpisodeUnit,
                 budget_s: float, max_batch: int, placement: str) -> PolicyProbe:
    from rollbench.scheduler.common import StepContext

    ctx = StepContext(cfg.env, cfg.policy)
    period = float(getattr(policy, "steps_per_inference", 1) or 1)
    torch: Any = sys.modules.get("torch")
    cpu_torch = torch is not None and cfg.policy.device == "cpu" and placement == "driver"
    threads = torch.get_num_threads() if cpu_torch else 1
    share = 0.6 if cpu_torch and threads > 1 else 1.0
    points = _time_batches(ctx, policy, obs, unit, budget_s * share, max_batch) if placement == "driver" else ()
    one: tuple[InferencePoint, ...] = ()
    if cpu_torch and threads > 1 and points:
        torch.set_num_threads(1)
        try:
            one = _time_batches(ctx, policy, obs, unit, budget_s * (1 - share), max(p.batch for p in points))
        finally:
            torch.set_num_threads(threads)
    amp: tuple[InferencePoint, ...] = ()
    if placement == "driver" and cfg.policy.device.startswith("cuda") and not cfg.policy.use_amp and points:
        amp = _amp_points(cfg, obs, unit, budget_s / 2, [p.batch for p in points])
    return PolicyProbe(
        type=cfg.policy.type,
        device=cfg.policy.device,
        placement=placement,
        per_slot_state=bool(getattr(policy, "per_slot_state", True)),
        load_s=measured(load_s, "building the policy in this process"),
        param_bytes=measured(param_bytes(policy), "parameters and buffers of its torch modules"),
        rss_bytes=measured(max(0, rss_now() - rss_before), "resident memory the policy added here"),
        steps_per_inference=measured(period, "steps served per network call") if period > 1
        else measured(1.0, "a network call every step"),
        inference=points,
        amp_inference=amp,
        inference_1t=one,
        threads=threads,
    )


def _time_batches(ctx: Any, policy: Policy, obs: Any, unit: EpisodeUnit, budget_s: float, max_batch: int) -> tuple[InferencePoint, ...]:
    from rollbench.scheduler.shm import stack_any

    torch: Any = sys.modules.get("torch")
    cuda = torch is not None and ctx.policy_config.device.startswith("cuda")
    deadline = time.monotonic() + budget_s
    start = ctx.episode_start(unit)
    points: list[InferencePoint] = []
    b = 1
    while b <= max_batch:
        batch = stack_any([obs] * b)
        slots = list(range(b))
        desc = [start.description] * b
        fulls, queued, cpu, wall = [], [], 0.0, 0.0
        peak = None
        for rep in range(4):
            policy.reset(slots, [start] * b)
            if cuda and rep == 3:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            c0, t0 = time.process_time(), time.perf_counter()
            ctx.act(policy, batch, slots, desc)
            if cuda:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if rep:  # the first call warms up (allocations, kernel selection)
                fulls.append(dt)
                cpu += time.process_time() - c0
                wall += dt
            if cuda and rep == 3:
                peak = int(torch.cuda.max_memory_allocated() - base)
            t0 = time.perf_counter()
            ctx.act(policy, batch, slots, desc)
            if cuda:
                torch.cuda.synchronize()
            queued.append(time.perf_counter() - t0)
            if time.monotonic() > deadline and rep >= 1:
                break
        full_ms = 1000.0 * _median(fulls)
        points.append(InferencePoint(b, full_ms, min(full_ms, 1000.0 * _median(queued)), cpu / max(wall, 1e-9), peak))
        if time.monotonic() > deadline:
            break
        if len(points) >= 2:
            prev, cur = points[-2], points[-1]
            if cur.full_ms / cur.batch > 0.9 * prev.full_ms / prev.batch and b >= 4:
                break  # time per row stopped falling
        b *= 2
    return tuple(points)


def _amp_points(cfg: RunConfig, obs: Any, unit: EpisodeUnit, budget_s: float, batches: list[int]) -> tuple[InferencePoint, ...]:
    import dataclasses

    from rollbench.scheduler.common import StepContext

    pol_cfg = dataclasses.replace(cfg.policy, use_amp=True)
    ctx = StepContext(cfg.env, pol_cfg)
    policy = ctx.make_policy()
    try:
        return _time_batches(ctx, policy, obs, unit, budget_s, max(batches))
    finally:
        policy.close()


def max_useful_batch(n_units: int, cores: int) -> int:
    return max(1, min(256, 2 ** math.ceil(math.log2(max(1, min(n_units, 32 * cores))))))
