"""From a probe to a recommendation: a small performance model of rollbench's schedulers.

Continuous mode, worker placement (cheap CPU policies): each of W workers steps its slot
and runs the policy itself, with no round trip, so

    steps/s = W / loop(W)

where loop(W) is one iteration of a worker's loop (policy, env step, bookkeeping, resets
amortised) with W processes stepping at once: measured alone and with P processes at once
(P = the workers the run most likely starts), interpolated in between; above the core
count, cores are time-sliced. (Probes without loop figures: step(W) + policy + 0.03 ms.)

Continuous mode, driver placement (networks): W workers in G = 2 groups (1 when W = 1)
alternate; while one group steps its K slots per worker, the driver runs one batched call
for the other. With R = W*K rows, b = R/G rows per call and a cycle in which every group
steps once:

    cycle = max(G * infer(b), K * step(W) + round_trip + infer(b))    (pipelining)
    cycle >= (R * step_1 + G * infer(b) * cpu_util) / cores           (CPU inference shares cores)
    steps/s = R / cycle

infer(b) is the measured time per call, amortised over a chunk (a call that runs the
network every `steps_per_inference` steps, queue pops in between).

Lockstep mode (policies without per-slot state): lerobot-eval's loop, B envs of one task
stepped together in this process (or in B subprocesses with async envs); finished envs
keep stepping until the batch's longest episode ends.

eval_s (what `eval_info.json` reports as `overall.eval_s`: from the first episode's start
to the last episode's end) = the steps at that rate + the tail (the last episodes run with
fewer slots busy) + the env builds of a worker's later tasks. Wall time = start-up (launch,
policy load, worker start, each worker's first env) + eval_s. The predicted throughput is
total steps / eval_s, the quantity `eval_info.json` gives (steps / `eval_s`). Candidates
(W, K) are ranked by predicted wall time; near-ties go to fewer processes and slots.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

from rollbench.scheduler.common import driver_threads as scheduler_driver_threads
from rollbench.scheduler.decide import auto_mode
from rollbench.tune.figures import InferencePoint, Probe

#: below this fraction, a candidate with more processes/slots is not worth it
TIE = 0.01
#: python start-up, `rollbench eval`'s imports, and the merge and eval_info write at the end
#: (estimated: measured once here as 0.3-0.5 s; not probed per run)
LAUNCH_S = 0.5
#: per-step bookkeeping in a worker (tracker, shared memory write), ms (estimated)
WORKER_OVERHEAD_MS = 0.03
#: the driver's own work per policy call in driver placement, besides the policy (wait,
#: read the rows, check and send the actions), ms (estimated: ~0.5 ms per call in a py-spy
#: profile of PushT + LeRobot ACT on 2 cores here, at one row per call)
DRIVER_CALL_MS = 0.4
#: memory head-room: never plan to use more than this share of what is available
MEM_SHARE = 0.8


@dataclass(frozen=True)
class Candidate:
    mode: str
    placement: str
    workers: int
    slots_per_worker: int
    batch: int  # rows per policy call (lockstep: envs per batch)
    use_async_envs: bool
    steps_per_s: float  # while every slot is busy
    wall_s: float
    startup_s: float
    bound: str  # simulation | inference | cpu | memory
    _total: float = 0.0  # the run's steps (tune's JSON lists the alternatives with it)
    eval_s: float = 0.0  # first episode's start to last episode's end (0: wall_s - startup_s)


@dataclass(frozen=True)
class Recommendation:
    mode: str
    placement: str
    workers: int
    slots_per_worker: int
    envs_per_batch: int | None  # lockstep: --eval.batch_size
    max_rows_per_call: int | None  # continuous, driver placement: --policy.max_batch_size
    use_async_envs: bool
    render_device: str
    use_amp: bool
    num_shards: int
    #: total steps / predicted eval_s: what eval_info.json reports (its steps over
    #: `overall.eval_s`, the first episode's start to the last one's end; start-up excluded)
    predicted_steps_per_s: float
    steady_steps_per_s: float  # while every slot is busy
    predicted_wall_s: float  # the whole command: start-up + eval_s (the probe not included)
    predicted_total_steps: float
    bottleneck: str  # one sentence
    reasons: tuple[str, ...] = ()
    alternatives: tuple[Candidate, ...] = field(default_factory=tuple)
    predicted_eval_s: float = 0.0


# -- inference ---------------------------------------------------------------------------


def _interp(points: tuple[InferencePoint, ...], batch: float, attr: str) -> float:
    """Time per call at `batch`, interpolated in batch size; linear per row beyond the last point."""
    pts = sorted(points, key=lambda p: p.batch)
    if batch <= pts[0].batch:
        return float(getattr(pts[0], attr))
    for a, b in itertools.pairwise(pts):
        if batch <= b.batch:
            ta, tb = getattr(a, attr), getattr(b, attr)
            return float(ta + (tb - ta) * (batch - a.batch) / (b.batch - a.batch))
    last = pts[-1]
    return float(getattr(last, attr)) * batch / last.batch


def _points(probe: Probe, threads: int | None) -> tuple[InferencePoint, ...]:
    """Inference points for a driver with `threads` torch threads (CPU policies): measured at
    one thread and at the default; in between, the speed-up is interpolated linearly."""
    pol = probe.policy
    if threads is None or not pol.inference_1t or pol.threads <= 1:
        return pol.inference
    if threads <= 1:
        return pol.inference_1t
    if threads >= pol.threads:
        return pol.inference
    out = []
    for one in pol.inference_1t:
        full = _interp(pol.inference, one.batch, "full_ms")
        gain = max(1.0, one.full_ms / max(full, 1e-9))
        f = 1 + (gain - 1) * (threads - 1) / (pol.threads - 1)
        out.append(InferencePoint(one.batch, one.full_ms / f, one.queued_ms, min(float(threads), one.cpu_util * f)))
    return tuple(out)


def driver_threads(probe: Probe, workers: int) -> int:
    """Torch threads the driver runs with beside `workers` workers (the scheduler's rule)."""
    return scheduler_driver_threads(cores(probe), workers)


def infer_ms(probe: Probe, rows: float, lockstep: bool = False, threads: int | None = None) -> float:
    """Mean driver time per call for `rows` rows, chunking amortised."""
    pts = _points(probe, threads)
    if not pts or rows <= 0:
        return 0.0
    period = max(1.0, probe.policy.steps_per_inference.v)
    queued = _interp(pts, rows, "queued_ms")
    if period <= 1:
        return _interp(pts, rows, "full_ms")
    if lockstep:  # the whole batch runs dry together, every `period` steps
        return queued + (_interp(pts, rows, "full_ms") - queued) / period
    # continuous: slots desynchronise; each call runs the network on the ~rows/period dry rows
    dry = max(1.0, rows / period)
    full_dry = _interp(pts, dry, "full_ms")
    return queued + full_dry * (rows / period) / dry


def cpu_util(probe: Probe, rows: float, threads: int | None = None) -> float:
    pts = _points(probe, threads)
    if not pts:
        return 1.0
    return max(1.0, _interp(pts, rows, "cpu_util")) if probe.policy.device == "cpu" else 1.0


# -- simulation --------------------------------------------------------------------------


def cores(probe: Probe) -> int:
    return max(1, int(probe.machine.cores.v))


def step_ms(probe: Probe, workers: int) -> float:
    """Wall time of one env step of one slot, with `workers` processes stepping at once.

    Includes the amortised reset and the video frames of the filmed share of episodes.
    Up to the core count, contention is interpolated between one process alone and one
    per core; above it, cores are time-sliced.
    """
    env, c = probe.env, cores(probe)
    s1, sc = env.step_ms_1.v, max(env.step_ms_1.v, env.step_ms_all.v)
    if workers <= 1:
        base = s1
    elif c <= 1 or workers >= c:
        base = sc
    else:
        base = s1 + (sc - s1) * (workers - 1) / (c - 1)
    return (base + _per_step_extras(probe)) * max(1.0, workers / c)


def loop_ms(probe: Probe, workers: int) -> float:
    """Wall time of one iteration of a worker's loop in worker placement (policy, env step,
    bookkeeping, resets amortised) with `workers` processes stepping at once, plus the
    filmed share of video frames.

    Measured alone and with `env.parallel` processes at once; interpolated in between, and
    time-sliced above the core count. Probes without loop figures: the env step + policy +
    WORKER_OVERHEAD_MS.
    """
    env, c = probe.env, cores(probe)
    if env.loop_ms_1 is None:
        return step_ms(probe, workers) + env.policy_ms_worker.v + WORKER_OVERHEAD_MS
    l1 = env.loop_ms_1.v
    la = max(l1, env.loop_ms_all.v) if env.loop_ms_all is not None else l1
    p = max(1, env.parallel)
    if workers <= 1 or p <= 1:
        base = l1 if workers <= 1 else l1 * step_ms(probe, min(workers, c)) / max(step_ms(probe, 1), 1e-9)
    elif workers >= p:
        base = la
    else:
        base = l1 + (la - l1) * (workers - 1) / (p - 1)
    return (base + _video_ms(probe)) * max(1.0, workers / c)


def _video_ms(probe: Probe) -> float:
    run = probe.run
    filmed = min(run.videos_per_task, run.n_episodes) / max(1, run.n_episodes)
    return filmed * probe.env.render_ms.v


def _per_step_extras(probe: Probe) -> float:
    return probe.env.reset_ms.v / max(1.0, probe.env.episode_steps.v) + _video_ms(probe)


def total_steps(probe: Probe) -> float:
    return probe.run.n_units * max(1.0, probe.env.episode_steps.v)


# -- candidates --------------------------------------------------------------------------


def _startup(probe: Probe, workers: int, slots: int) -> float:
    """Before the first episode starts (outside eval_s): launch, the policy, the workers, and
    each worker's envs for its first episodes."""
    env = probe.env
    build = env.first_build_s.v + max(0, slots - 1) * env.build_s.v
    # workers start and build in parallel with each other, time-sliced above the core count
    crowd = max(1.0, workers / cores(probe))
    return LAUNCH_S + env.driver_setup_s.v + probe.policy.load_s.v + env.worker_start_s.v * crowd + build * crowd


def _builds_in_span(probe: Probe, workers: int, slots: int) -> float:
    """Seconds a worker spends building envs after the first episode started (inside eval_s).

    Task affinity gives each worker about n_tasks / workers tasks; its first env is built
    before the run's first episode, the others while the other workers step; at the end a
    worker whose tasks ran dry joins one still running (half a build on average, measured:
    4 MetaWorld tasks on 2 workers built 3 and 2 envs).
    """
    run, env = probe.run, probe.env
    if run.n_tasks <= workers:
        return 0.0
    crowd = max(1.0, workers / cores(probe))
    return (run.n_tasks / workers - 0.5) * slots * env.build_s.v * crowd


def _sim_wall(probe: Probe, rows: int, rate: float) -> float:
    """Seconds of stepping for the whole run at `rate` steps/s with `rows` slots."""
    env, run = probe.env, probe.run
    rows = max(1, min(rows, run.n_units))
    length = max(1.0, env.episode_steps.v)
    per_slot_step_s = rows / rate  # one slot advances one step in this time
    if env.episode_steps_constant:
        waves = math.ceil(run.n_units / rows)
        return waves * length * per_slot_step_s
    tail = 0.5 * length * per_slot_step_s if run.n_units > 1 else 0.0
    return total_steps(probe) / rate + tail


def continuous_worker(probe: Probe, workers: int) -> Candidate:
    rate = workers * 1000.0 / loop_ms(probe, workers)
    startup = _startup(probe, workers, 1)
    eval_s = _sim_wall(probe, workers, rate) + _builds_in_span(probe, workers, 1)
    return Candidate("continuous", "worker", workers, 1, 1, False, rate, startup + eval_s, startup, "simulation",
                     total_steps(probe), eval_s)


def continuous_driver(probe: Probe, workers: int, slots: int) -> Candidate:
    rows = min(workers * slots, probe.run.n_units)
    groups = 2 if workers >= 2 else 1
    b = rows / groups
    threads = driver_threads(probe, workers)
    sim = slots * step_ms(probe, workers) + probe.env.roundtrip_ms.v

    def cycle_for(inf: float) -> float:
        """One cycle of the driver loop: it serves the groups in turn; a group steps while
        the driver runs the other group's call."""
        inf += DRIVER_CALL_MS
        return max(groups * inf, sim + inf) if groups == 2 else sim + inf

    period = max(1.0, probe.policy.steps_per_inference.v)
    in_phase = period > 1 and probe.env.episode_steps_constant
    if in_phase:
        # Every episode runs the same number of steps and the slots start together, so every
        # slot's queue runs dry at the same step: one cycle in `period` runs the network on
        # all rows of both groups (nothing else overlaps it), the others only pop queues.
        # Averaging the call time first would hide that burst.
        pts = _points(probe, threads)
        full, queued = _interp(pts, b, "full_ms"), _interp(pts, b, "queued_ms")
        pipelined = (cycle_for(full) + (period - 1) * cycle_for(queued)) / period
        inf = infer_ms(probe, b, lockstep=True, threads=threads)
    else:
        inf = infer_ms(probe, b, threads=threads)
        pipelined = cycle_for(inf)
    inference_bound = groups * inf >= sim + inf if groups == 2 else inf >= sim
    cycle, bound = pipelined, ("inference" if inference_bound else "simulation")
    if probe.policy.device == "cpu":
        cpu_cycle = _cpu_cycle_ms(probe, rows, groups, inf, b, threads)
        if cpu_cycle > cycle:
            cycle, bound = cpu_cycle, "cpu"
    rate = rows * 1000.0 / max(cycle, 1e-6)
    startup = _startup(probe, workers, slots)
    eval_s = _sim_wall(probe, rows, rate) + _builds_in_span(probe, workers, slots)
    return Candidate("continuous", "driver", workers, slots, max(1, round(b)), False, rate, startup + eval_s, startup, bound,
                     total_steps(probe), eval_s)


def _cpu_cycle_ms(probe: Probe, rows: int, groups: int, inf: float, b: float, threads: int) -> float:
    """A driver-loop cycle's ms when the cores are the limit (a policy on the CPU): every row's
    env step and each group's call of `inf` ms at `b` rows, spread over the cores."""
    core_ms = rows * (probe.env.step_ms_1.v + _per_step_extras(probe)) + groups * (
        inf * cpu_util(probe, b, threads) + DRIVER_CALL_MS
    )
    return core_ms / cores(probe)


def _expected_max_share(probe: Probe, batch: int) -> float:
    """Useful steps / stepped steps in a lockstep batch (finished envs keep stepping)."""
    if probe.env.episode_steps_constant or batch <= 1:
        return 1.0
    # unknown length distribution: assume lengths spread evenly over [mean/2, 3*mean/2]
    mean = probe.env.episode_steps.v
    top = min(float(probe.env.max_steps), 1.5 * mean)
    low = max(1.0, 0.5 * mean)
    expected_max = low + (top - low) * batch / (batch + 1)
    return min(1.0, mean / expected_max)


def lockstep(probe: Probe, batch: int, use_async: bool) -> Candidate:
    c = cores(probe)
    batch = max(1, min(batch, probe.run.n_episodes))
    inf = infer_ms(probe, batch, lockstep=True)
    if use_async and batch > 1:
        procs = min(batch, c)
        sim = math.ceil(batch / procs) * step_ms(probe, procs) + probe.env.roundtrip_ms.v * (1 + 0.05 * batch)
        sim_core = batch * probe.env.step_ms_1.v
    else:
        sim = batch * step_ms(probe, 1)
        sim_core = sim
    cycle = sim + inf
    bound = "inference" if inf > sim else "simulation"
    cpu_cycle = (sim_core + inf * cpu_util(probe, batch)) / c
    if probe.policy.device == "cpu" and cpu_cycle > cycle:
        cycle, bound = cpu_cycle, "cpu"
    useful = _expected_max_share(probe, batch)
    rate = batch * 1000.0 / cycle * useful
    startup = LAUNCH_S + probe.policy.load_s.v + probe.env.first_build_s.v + (probe.run.n_tasks * batch - 1) * probe.env.build_s.v
    if use_async and batch > 1:
        startup += probe.run.n_tasks * probe.env.worker_start_s.v
    per_task_batches = math.ceil(probe.run.n_episodes / batch)
    length = max(1.0, probe.env.episode_steps.v)
    stepped = probe.run.n_tasks * per_task_batches * batch * length / useful
    wall = startup + stepped * cycle / 1000.0 / batch
    # the batch's envs step in env workers: one (sequential), or one per core (in parallel)
    workers = min(batch, c) if use_async and batch > 1 else 1
    return Candidate("lockstep", "driver", workers, math.ceil(batch / workers), batch, use_async, rate, wall, startup,
                     bound, total_steps(probe))


# -- the recommendation ------------------------------------------------------------------


def _pow2_upto(n: int) -> list[int]:
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return sorted({*out, max(1, n)})


def memory_cap(probe: Probe) -> int:
    """How many workers fit in memory (the driver's policy counted first)."""
    avail = probe.machine.mem_available_bytes.v * MEM_SHARE - probe.policy.rss_bytes.v
    per = max(probe.env.worker_rss_bytes.v, 1.0)
    if probe.policy.placement == "worker":
        per += probe.policy.rss_bytes.v
    return max(1, int(avail // per))


def gpu_batch_cap(probe: Probe) -> int | None:
    """The largest batch whose activations fit in the policy's GPU (None: no limit known)."""
    pol = probe.policy
    if not pol.device.startswith("cuda") or not probe.machine.gpus:
        return None
    gpu = probe.machine.gpus[0]
    if gpu.free_mib is None:
        return None
    free = gpu.free_mib * 2**20 * MEM_SHARE - pol.param_bytes.v
    grown = [p for p in pol.inference if p.peak_bytes]
    if not grown:
        return None
    per_row = max(p.peak_bytes / p.batch for p in grown if p.peak_bytes)  # type: ignore[operator]
    return max(1, int(free // max(per_row, 1.0)))


def candidates(probe: Probe) -> list[Candidate]:
    run, c = probe.run, cores(probe)
    mode = run.mode if run.mode != "auto" else auto_mode(probe.policy.per_slot_state, run.same_process)
    placement = run.placement if run.placement != "auto" else probe.policy.placement
    out: list[Candidate] = []
    max_workers = max(1, min(memory_cap(probe), 2 * c, run.n_units))
    if mode == "lockstep":
        for b in _pow2_upto(min(run.n_episodes, 64)):
            out.append(lockstep(probe, b, False))
            if b > 1:
                out.append(lockstep(probe, b, True))
        return out
    if placement == "worker":
        return [continuous_worker(probe, w) for w in range(1, max_workers + 1)]
    cap = gpu_batch_cap(probe)
    for w in range(1, max_workers + 1):
        for k in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32):
            if w * k > max(run.n_units, w):
                break
            if cap is not None and w * k / (2 if w >= 2 else 1) > cap:
                break
            out.append(continuous_driver(probe, w, k))
    return out


def _cost(c: Candidate) -> tuple[float, int]:
    return (c.wall_s, c.workers * c.slots_per_worker)


def pick(cands: list[Candidate]) -> Candidate:
    """The fastest, except that a simpler one within TIE of it wins."""
    best = min(cands, key=_cost)
    near = [c for c in cands if c.wall_s <= best.wall_s * (1 + TIE)]
    return min(near, key=lambda c: (c.workers * c.slots_per_worker, c.workers, c.wall_s))


def bottleneck_sentence(probe: Probe, best: Candidate) -> str:
    c = cores(probe)
    per_step = loop_ms(probe, best.workers) if best.placement == "worker" and best.mode == "continuous" \
        else step_ms(probe, best.workers)
    sim_rate = best.workers * 1000.0 / max(per_step, 1e-6)
    if best.mode == "lockstep":
        inf = infer_ms(probe, best.batch, lockstep=True)
        where = f"lockstep batches of {best.batch}" + (" (async envs)" if best.use_async_envs else "")
    else:
        inf = infer_ms(probe, best.batch, threads=driver_threads(probe, best.workers))
        where = f"{best.workers} workers x {best.slots_per_worker} slots"
    infer_txt = (
        f"inference at batch {best.batch} takes {inf:.3g} ms per call"
        if best.placement == "driver" and probe.policy.inference
        else f"the policy takes {probe.env.policy_ms_worker.v:.3g} ms per step inside each worker"
    )
    what = {
        "simulation": "simulation-bound",
        "inference": "inference-bound",
        "cpu": "CPU-bound (simulation and inference share the cores)",
        "memory": "memory-bound",
    }[best.bound]
    return (
        f"{what}: {c} cores x {1000.0 / max(per_step, 1e-6):.3g} steps/s per core "
        f"(~{sim_rate:.3g} steps/s of simulation with {where}); {infer_txt}"
    )


def recommend(probe: Probe) -> Recommendation:
    cands = candidates(probe)
    best = pick(cands)
    reasons: list[str] = []
    best = _memory_bound(probe, best, reasons)
    cap = gpu_batch_cap(probe)
    max_rows = cap if cap is not None and best.placement == "driver" and best.mode == "continuous" else None
    envs_per_batch = best.batch if best.mode == "lockstep" else None
    if max_rows is not None:
        reasons.append(f"GPU memory: activations fit at most {cap} rows per call")
    render = _render_choice(probe, reasons)
    amp = _amp_choice(probe, best, reasons)
    shards = _shard_choice(probe, best, reasons)
    total = total_steps(probe)
    reasons.append(_mode_reason(best))
    if shards > 1:
        # each shard gets its share of cores and units; throughput adds up across GPUs
        per_workers = max(1, cores(probe) // shards)
        best = dataclasses.replace(best, workers=min(best.workers, per_workers))
    eval_s = best.eval_s if best.eval_s > 0 else max(1e-9, best.wall_s - best.startup_s)
    ranked = sorted(cands, key=_cost)[:5]
    return Recommendation(
        mode=best.mode, placement=best.placement, workers=best.workers, slots_per_worker=best.slots_per_worker,
        envs_per_batch=envs_per_batch, max_rows_per_call=max_rows, use_async_envs=best.use_async_envs, render_device=render, use_amp=amp,
        num_shards=shards, predicted_steps_per_s=total / eval_s,
        steady_steps_per_s=best.steps_per_s, predicted_wall_s=best.wall_s, predicted_total_steps=total,
        bottleneck=bottleneck_sentence(probe, best), reasons=tuple(reasons), alternatives=tuple(ranked),
        predicted_eval_s=eval_s,
    )


def _memory_bound(probe: Probe, best: Candidate, reasons: list[str]) -> Candidate:
    """`best`, its bound "memory" when the memory available fits fewer workers than the cores
    and `best` runs that many (a reason added to `reasons`)."""
    mem_cap = memory_cap(probe)
    bound = best.bound
    if best.workers >= mem_cap and mem_cap < cores(probe):
        bound = "memory"
        reasons.append(
            f"memory: {probe.machine.mem_available_bytes.v / 2**30:.1f} GiB available fits {mem_cap} workers "
            f"of {probe.env.worker_rss_bytes.v / 2**20:.0f} MiB"
        )
    return dataclasses.replace(best, bound=bound)


def _shard_choice(probe: Probe, best: Candidate, reasons: list[str]) -> int:
    """Local shards to run: one per GPU when there are several and the policy runs on CUDA in
    the driver (a reason added to `reasons`), else 1."""
    gpus = probe.machine.gpus
    shards = 1
    if len(gpus) >= 2 and probe.policy.device.startswith("cuda") and best.placement == "driver":
        shards = len(gpus)
        reasons.append(f"{len(gpus)} GPUs: one local shard per GPU (--executor=shards --eval.num_shards={shards}), "
                       f"each with {max(1, cores(probe) // shards)} workers")
    return shards


def _mode_reason(best: Candidate) -> str:
    """The reason that names `best`'s mode: its workers and slots, or its batches."""
    if best.mode == "continuous":
        return (f"continuous batching: {best.workers} workers x {best.slots_per_worker} slots, "
                f"policy in the {best.placement}")
    return (f"lockstep: the policy keeps no per-slot state; batches of {best.batch} envs"
            + (" in subprocesses" if best.use_async_envs else ""))


def _render_choice(probe: Probe, reasons: list[str]) -> str:
    run, env = probe.run, probe.env
    renders = run.renders_obs or run.videos_per_task > 0
    if run.render_device != "auto":
        return run.render_device
    if probe.machine.gpus:
        if renders:
            reasons.append("rendering: EGL on the GPU")
        return "gpu"
    if renders and env.other_backend and env.other_render_ms is not None and env.other_render_ms.value is not None:
        faster = env.other_backend if env.other_render_ms.v < env.render_ms.v else env.backend
        reasons.append(
            f"rendering on CPU: {env.backend} {env.render_ms.v:.3g} ms/frame, {env.other_backend} "
            f"{env.other_render_ms.v:.3g} ms/frame -> {faster}"
        )
    return "cpu"


def _amp_choice(probe: Probe, best: Candidate, reasons: list[str]) -> bool:
    pol = probe.policy
    if not pol.device.startswith("cuda") or not pol.amp_inference or best.placement != "driver":
        return False
    plain = _interp(pol.inference, best.batch, "full_ms")
    amp = _interp(pol.amp_inference, best.batch, "full_ms")
    if amp < plain / 1.2:
        reasons.append(f"AMP: {plain:.3g} -> {amp:.3g} ms per call at batch {best.batch} (changes numerics: "
                       f"compare with a full-precision run before trusting small differences)")
        return True
    return False
