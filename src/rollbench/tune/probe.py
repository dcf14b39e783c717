"""Measure this machine for one evaluation: cores, memory, GPUs, env costs, inference costs.

The env is measured in worker-like processes (`env_probe.py`: P processes at once, short
windows together and alone, trimmed means). The policy is measured in this process, as
the driver runs it: load time, weights, memory, and time per call at batch sizes 1, 2,
4, ... until the time per row stops falling.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext, stack_any
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import Policy
from rollbench.scheduler.common import cpu_count
from rollbench.tune.figures import (
    Figure,
    GpuInfo,
    InferencePoint,
    MachineProbe,
    PolicyProbe,
    estimated,
    measured,
)
from rollbench.tune.stats import median

log = logging.getLogger(__name__)


# -- the machine -------------------------------------------------------------------------


def probe_machine() -> MachineProbe:
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
    ctx = StepContext(cfg.env, cfg.policy)
    period = float(policy.steps_per_inference or 1)
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
        per_slot_state=policy.per_slot_state,
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
    """The policy's points at batch sizes 1, 2, 4, ... up to `max_batch`, until the budget is
    spent or the time per row stops falling."""
    torch: Any = sys.modules.get("torch")
    cuda = torch is not None and ctx.policy_config.device.startswith("cuda")
    deadline = time.monotonic() + budget_s
    start = ctx.episode_start(unit)
    points: list[InferencePoint] = []
    b = 1
    while b <= max_batch:
        batch = stack_any([obs] * b)
        desc = [ctx.benchmark.policy_task(unit.task)] * b  # what a run's calls give the policy (lerobot-eval's task string)
        points.append(_time_batch(ctx, policy, batch, desc, start, torch if cuda else None, deadline))
        if time.monotonic() > deadline:
            break
        if len(points) >= 2:
            prev, cur = points[-2], points[-1]
            if cur.full_ms / cur.batch > 0.9 * prev.full_ms / prev.batch and b >= 4:
                break  # time per row stopped falling
        b *= 2
    return tuple(points)


def _time_batch(ctx: Any, policy: Policy, batch: Any, desc: list[str], start: Any, torch: Any,
                deadline: float) -> InferencePoint:
    """One batch's point: up to four rounds (fewer past `deadline`, never fewer than two) of a
    reset, a full call and a call the queues serve; the first round warms up. `torch` is the
    torch module when the policy runs on CUDA (the last round then reads the peak memory), else None."""
    b = len(desc)
    slots = list(range(b))
    cuda = torch is not None
    fulls, queued, cpu, wall = [], [], 0.0, 0.0
    peak = None
    for rep in range(4):
        ctx.reset(policy, slots, [start] * b)
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
    full_ms = 1000.0 * median(fulls)
    return InferencePoint(b, full_ms, min(full_ms, 1000.0 * median(queued)), cpu / max(wall, 1e-9), peak)


def _amp_points(cfg: RunConfig, obs: Any, unit: EpisodeUnit, budget_s: float, batches: list[int]) -> tuple[InferencePoint, ...]:
    pol_cfg = dataclasses.replace(cfg.policy, use_amp=True)
    ctx = StepContext(cfg.env, pol_cfg, cfg.seed)
    policy = ctx.make_policy()
    try:
        return _time_batches(ctx, policy, obs, unit, budget_s, max(batches))
    finally:
        policy.close()


def max_useful_batch(n_units: int, cores: int) -> int:
    return max(1, min(256, 2 ** math.ceil(math.log2(max(1, min(n_units, 32 * cores))))))
