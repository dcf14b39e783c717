"""Throughput side by side, on the same episodes: ceiling vs rollbench vs lerobot-eval style.

    python bench/throughput.py --workload mt10-expert --episodes 5 --repeats 3
    python bench/throughput.py --workload mt10-mlp                         (needs torch)

Variants, each run on exactly the same units (MT10 x episodes, seeds 1000+i):
  ceiling     one raw process per core, no harness: the plan cut into one contiguous share per
              process (whole tasks where possible), each task's env built once per process,
              reset(seed), step with the policy. Prints its start-up + env builds (warm-up:
              simulator, GL context, first frame) apart from its steady-state rate (steps over
              each process's stepping time, summed over processes: the physical ceiling)
  continuous  rollbench continuous batching (default workers, slots and placement)
  continuous-worker / continuous-driver   the same with --policy.placement forced
  lockstep    rollbench lockstep mode (--eval.batch_size; the batch's envs in env workers, one per core)
  lockstep-here   the same with --eval.isolation=none: a SyncVectorEnv in this process (lerobot-eval's
              default; a crashing env ends the run)
  ray         rollbench --executor=ray: a local Ray instance (started and shut down inside the
              clock) with one actor per core, each stepping its slot and running the policy
  lerobot     lerobot-eval's loop re-created: one process, task by task, a SyncVectorEnv batch
              stepped until its slowest episode ends (finished envs keep stepping, masked)

Env-steps/s counts the steps of the episodes (the same total for every variant; checked),
over the wall time of the whole variant, env builds and process starts included. Each
variant runs `--repeats` times, interleaved; the medians and their ratios are printed.
CPU ms/step is the CPU time of every process of the variant (this one and all its
descendants, sampled from /proc) per env step: on a machine that other jobs load, wall-clock
rates follow the share of the cores the variant got, CPU per step does not.

Every variant renders with the same settings ($MUJOCO_GL, $LP_NUM_THREADS as this process has
them); `bench/render_threads.py` compares llvmpipe thread counts and GL backends on their own.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_policies import WORKLOADS, make_raw_policy
from proctable import cpu_table
from rollbench.config.codec import config_from_flags
from rollbench.executors.local import LocalExecutor
from rollbench.lifecycle import run_eval
from rollbench.plan import EpisodeUnit, make_plan
from rollbench.scheduler.common import cpu_count


class CpuMeter:
    """CPU seconds of this process and its descendants while in use (Linux /proc, sampled
    every 0.1 s, so a process that exits loses at most its last 0.1 s)."""

    def __init__(self) -> None:
        self.start: dict[int, float] = {}
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _tree(self) -> dict[int, float]:
        stats = cpu_table()
        out = {os.getpid(): stats.get(os.getpid(), (0, 0.0))[1]}
        frontier = [os.getpid()]
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, cpu) in stats.items():
                if ppid == parent and pid not in out:
                    out[pid] = cpu
                    frontier.append(pid)
        return out

    def _sample(self) -> None:
        for pid, cpu in self._tree().items():
            self.seen[pid] = max(self.seen.get(pid, 0.0), cpu)

    def _poll(self) -> None:
        while not self.stop.wait(0.1):
            self._sample()

    def __enter__(self) -> CpuMeter:
        self.start = self._tree()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._sample()

    @property
    def cpu_s(self) -> float:
        return sum(cpu - self.start.get(pid, 0.0) for pid, cpu in self.seen.items())


def _units(cfg: Any) -> list[EpisodeUnit]:
    return make_plan(cfg.env.tasks(), cfg.eval.n_episodes, cfg.seed)


def _raw_share(args: tuple[Any, list[EpisodeUnit], str]) -> dict[str, float]:
    """One core's raw loop over its share (task by task, each task's env built once).

    Returns its steps, warm-up seconds (env build and first reset: the simulator, the GL
    context, the first frame) and steady-state seconds (every episode's reset and steps).
    """
    bench, units, workload = args
    steps, warm_s, steady_s, steady_cpu_s = 0, 0.0, 0.0, 0.0
    for task, group in itertools.groupby(units, key=lambda u: u.task):
        task_units = list(group)
        t0 = time.perf_counter()
        env = bench.make_task_env(task)
        env.reset(seed=task_units[0].seed)
        t1, c1 = time.perf_counter(), time.process_time()  # CPU of all threads (llvmpipe's too)
        for u in task_units:
            act = make_raw_policy(workload, bench, u)
            obs, _ = env.reset(seed=u.seed)
            for _ in range(bench.effective_max_steps(u.task)):
                obs, _, terminated, truncated, info = env.step(act(bench.to_features(obs)))
                steps += 1
                if terminated or truncated or info.get("is_success"):
                    break
        t2, c2 = time.perf_counter(), time.process_time()
        env.close()  # frees its GL context too: one alive per process
        warm_s, steady_s, steady_cpu_s = warm_s + t1 - t0, steady_s + t2 - t1, steady_cpu_s + c2 - c1
    return {"steps": steps, "warm_s": warm_s, "steady_s": steady_s, "steady_cpu_s": steady_cpu_s}


def _noop(_: int) -> int:
    return os.getpid()


@dataclass
class Outcome:
    wall_s: float
    steps: int
    steady: float | None = None  # the ceiling's steady-state steps/s
    note: str = ""


def ceiling(flags: dict[str, str], workload: str) -> Outcome:
    cfg = config_from_flags(flags)
    units = _units(cfg)  # task by task
    n = cpu_count()
    # n contiguous shares of equal size (±1): every core busy to the end, a task's env built
    # in as few processes as possible (once when tasks >= cores and divide evenly)
    bounds = [round(i * len(units) / n) for i in range(n + 1)]
    shares = [(cfg.env, units[bounds[i] : bounds[i + 1]], workload) for i in range(n)]
    start = time.perf_counter()
    with mp.get_context("forkserver").Pool(n) as pool:
        pool.map(_noop, range(n), chunksize=1)  # processes up before the clock of the shares starts
        started = time.perf_counter()
        parts = pool.map(_raw_share, shares, chunksize=1)
    wall = time.perf_counter() - start
    steady = sum(p["steps"] / p["steady_s"] for p in parts if p["steady_s"] > 0)
    steady_cpu_ms = 1000 * sum(p["steady_cpu_s"] for p in parts) / max(1, sum(int(p["steps"]) for p in parts))
    note = (f"start-up {started - start:.1f} s, env builds + first frames {max(p['warm_s'] for p in parts):.1f} s "
            f"(slowest process), steady state {steady:.1f} steps/s at {steady_cpu_ms:.1f} CPU ms/step")
    return Outcome(wall, sum(int(p["steps"]) for p in parts), steady, note)


def lerobot_style(flags: dict[str, str], batch_size: int) -> Outcome:
    """lerobot-eval's rollout loop, without its harness: sequential tasks, one sync batch."""
    import gymnasium as gym

    from rollbench.episode.context import StepContext
    from rollbench.episode.tracker import EpisodeTracker, split_vector_info

    cfg = config_from_flags(flags)
    ctx = StepContext(cfg.env, cfg.policy)
    policy = ctx.make_policy()
    steps = 0
    start = time.perf_counter()
    for group, names in cfg.env.tasks().items():
        for task_id, task in enumerate(names):
            units = [u for u in _units(cfg) if u.task_group == group and u.task_id == task_id]
            n_envs = min(batch_size, len(units))
            vec = gym.vector.SyncVectorEnv([lambda t=task: cfg.env.make_task_env(t) for _ in range(n_envs)])
            for b in range(0, len(units), n_envs):
                chunk = units[b : b + n_envs]
                padded = chunk + [chunk[0]] * (n_envs - len(chunk))
                obs, _ = vec.reset(seed=[u.seed for u in padded])
                slots = list(range(n_envs))
                policy.reset(slots, [ctx.episode_start(u) for u in padded])
                trackers = [EpisodeTracker(u, cfg.env.effective_max_steps(task), cfg.env.success) for u in chunk]
                done = np.array([i >= len(chunk) for i in range(n_envs)])
                while not done.all():
                    actions = ctx.act(policy, obs, slots, [task] * n_envs)
                    obs, rew, term, trunc, info = vec.step(actions)
                    infos = split_vector_info(info, n_envs)
                    for i in np.flatnonzero(~done):
                        done[i] = trackers[i].update(rew[i], term[i], trunc[i], infos[i])
                steps += sum(t.n_steps for t in trackers)
            vec.close()
    return Outcome(time.perf_counter() - start, steps)


def via_rollbench(flags: dict[str, str], extra: dict[str, str]) -> Outcome:
    with tempfile.TemporaryDirectory() as d:
        cfg = config_from_flags({**flags, **extra, "output_dir": d, "resume": "false"})
        start = time.perf_counter()
        with open(os.devnull, "w") as null:
            result = run_eval(cfg, LocalExecutor(), progress_stream=null)
        wall = time.perf_counter() - start
        steps = sum(sum(t["metrics"]["n_steps"]) for t in result.info.to_json()["per_task"])
    return Outcome(wall, steps)


def main() -> None:
    warnings.filterwarnings("ignore", message="Constant")  # MetaWorld's experts, every step
    os.environ["PYTHONWARNINGS"] = "ignore::UserWarning"  # the same, in worker processes
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="mt10-expert")
    ap.add_argument("--episodes", type=int, default=5, help="episodes per task")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=10, help="lockstep / lerobot-style batch (sync envs)")
    ap.add_argument("--variants", default="ceiling,continuous,lockstep,lerobot")
    ap.add_argument("--episode-length", type=int, default=None, help="cut episodes at this many steps")
    ap.add_argument("--render-device", default="auto", help="cpu (osmesa if installed), gpu (egl), auto")
    ap.add_argument("--render-quality", default=None, help="metaworld: default|fast")
    args = ap.parse_args()

    # no report.html: the ceiling writes none either (the page's own cost is in docs/architecture.md)
    flags = {**WORKLOADS[args.workload], "eval.n_episodes": str(args.episodes), "eval.max_episodes_rendered": "0",
             "eval.report": "false",
             "render_device": args.render_device}
    if args.episode_length:
        flags["env.episode_length"] = str(args.episode_length)
    if args.render_quality:
        flags["env.render_quality"] = args.render_quality
    from rollbench.rendering import apply_backend, choose_backend

    apply_backend(choose_backend(args.render_device))  # the ceiling's processes render the same way
    print(f"MUJOCO_GL={os.environ['MUJOCO_GL']}")
    runs: dict[str, Callable[[], Outcome]] = {
        "ceiling": lambda: ceiling(flags, args.workload),
        "continuous": lambda: via_rollbench(flags, {"eval.mode": "continuous"}),
        "continuous-worker": lambda: via_rollbench(flags, {"eval.mode": "continuous", "policy.placement": "worker"}),
        "continuous-driver": lambda: via_rollbench(flags, {"eval.mode": "continuous", "policy.placement": "driver"}),
        "lockstep": lambda: via_rollbench(flags, {"eval.mode": "lockstep", "eval.batch_size": str(args.batch_size)}),
        "lockstep-here": lambda: via_rollbench(
            flags, {"eval.mode": "lockstep", "eval.batch_size": str(args.batch_size), "eval.isolation": "none"}),
        "lerobot": lambda: lerobot_style(flags, args.batch_size),
        # a local Ray instance started and shut down inside the clock, 2 actors (one per core here)
        "ray": lambda: via_rollbench(flags, {"executor": "ray"}),
    }
    variants = [v.strip() for v in args.variants.split(",")]
    rates: dict[str, list[float]] = {v: [] for v in variants}
    steady: dict[str, list[float]] = {}
    cpu_ms: dict[str, list[float]] = {}
    steps_seen: dict[str, int] = {}
    for r in range(args.repeats):
        for v in variants:
            with CpuMeter() as meter:
                out = runs[v]()
            rates[v].append(out.steps / out.wall_s)
            cpu_ms.setdefault(v, []).append(1000 * meter.cpu_s / out.steps)
            if out.steady is not None:
                steady.setdefault(f"{v} steady", []).append(out.steady)
            steps_seen[v] = out.steps
            note = f"  ({out.note})" if out.note else ""
            print(f"repeat {r + 1} {v:<18} {out.steps:>7} steps {out.wall_s:7.2f} s {out.steps / out.wall_s:8.1f} steps/s "
                  f"{cpu_ms[v][-1]:6.1f} CPU ms/step{note}", flush=True)
    if len(set(steps_seen.values())) != 1:
        print(f"WARNING: variants took different step totals: {steps_seen}")
    med = {v: statistics.median(x) for v, x in {**rates, **steady}.items()}
    print(f"\nworkload {args.workload}: {args.episodes} episodes x 10 tasks, {cpu_count()} cores, "
          f"median of {args.repeats} (steady: the ceiling's stepping alone, its warm-up excluded)")
    for v in med:
        cpu = f"{statistics.median(cpu_ms[v]):8.1f} CPU ms/step" if v in cpu_ms else ""
        print(f"  {v:<25} {med[v]:8.1f} env-steps/s {cpu}")
    if "ray" in med and "continuous" in med:
        print(f"  ray / continuous = {med['ray'] / med['continuous']:.2f} (Ray's start-up included)")
    if "lockstep" in med and "lockstep-here" in med:
        print(f"  lockstep (env workers) / lockstep-here (same process) = {med['lockstep'] / med['lockstep-here']:.2f}")
    for c in (v for v in variants if v.startswith("continuous")):
        for v in (v for v in med if not v.startswith("continuous")):
            cpu = ""
            if v in cpu_ms:
                cpu = f"   CPU per step: {v} / {c} = {statistics.median(cpu_ms[v]) / statistics.median(cpu_ms[c]):.2f}"
            print(f"  {c} / {v} = {med[c] / med[v]:.2f}{cpu}")


if __name__ == "__main__":
    main()
