"""Throughput side by side, on the same episodes: ceiling vs rollbench vs lerobot-eval style.

    python bench/throughput.py --workload mt10-expert --episodes 5 --repeats 3
    python bench/throughput.py --workload mt10-mlp                         (needs torch)

Variants, each run on exactly the same units (MT10 x episodes, seeds 1000+i):
  ceiling     one raw loop per core: build env, reset(seed), step with the policy; no harness
  continuous  rollbench continuous batching (default workers, slots and placement)
  continuous-worker / continuous-driver   the same with --policy.placement forced
  lockstep    rollbench lockstep mode (--eval.batch_size, sync envs: lerobot-eval's default)
  lerobot     lerobot-eval's loop re-created: one process, task by task, a SyncVectorEnv batch
              stepped until its slowest episode ends (finished envs keep stepping, masked)

Env-steps/s counts the steps of the episodes (the same total for every variant; checked),
over the wall time of the whole variant, env builds and process starts included. Each
variant runs `--repeats` times, interleaved; the medians and their ratios are printed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_policies import WORKLOADS, make_raw_policy
from rollbench.cli import config_from_flags
from rollbench.executors.local import cpu_count, run_eval
from rollbench.plan import EpisodeUnit, make_plan


def _units(cfg: Any) -> list[EpisodeUnit]:
    return make_plan(cfg.env.tasks(), cfg.eval.n_episodes, cfg.seed)


def _raw_share(args: tuple[Any, list[EpisodeUnit], str]) -> int:
    """One core's raw loop over its share of the units; returns env steps taken."""
    bench, units, workload = args
    envs: dict[str, Any] = {}
    steps = 0
    for u in units:  # a process's units come task by task: one env alive at a time
        if u.task not in envs:
            for old in envs.values():
                old.close()  # frees its GL context too
            envs = {u.task: bench.make_task_env(u.task)}
        env = envs[u.task]
        act = make_raw_policy(workload, bench, u)
        obs, _ = env.reset(seed=u.seed)
        for _ in range(bench.effective_max_steps(u.task)):
            obs, _, terminated, truncated, info = env.step(act(bench.to_features(obs)))
            steps += 1
            if terminated or truncated or info.get("is_success"):
                break
    for env in envs.values():
        env.close()
    return steps


def ceiling(flags: dict[str, str], workload: str) -> tuple[float, int]:
    cfg = config_from_flags(flags)
    units = _units(cfg)
    n = cpu_count()
    # whole tasks per process, balanced by episode count: each task's env is built once
    tasks = sorted({u.task for u in units})
    shares = [(cfg.env, [u for u in units if tasks.index(u.task) % n == i], workload) for i in range(n)]
    start = time.perf_counter()
    with mp.get_context("forkserver").Pool(n) as pool:
        steps = sum(pool.map(_raw_share, shares))
    return time.perf_counter() - start, steps


def lerobot_style(flags: dict[str, str], batch_size: int) -> tuple[float, int]:
    """lerobot-eval's rollout loop, without its harness: sequential tasks, one sync batch."""
    import gymnasium as gym

    from rollbench.rollout import EpisodeTracker, split_vector_info
    from rollbench.scheduler.common import StepContext

    cfg = config_from_flags(flags)
    ctx = StepContext(cfg.env, cfg.policy)
    policy = ctx.make_policy()
    steps = 0
    start = time.perf_counter()
    for suite, names in cfg.env.tasks().items():
        for task_id, task in enumerate(names):
            units = [u for u in _units(cfg) if u.suite == suite and u.task_id == task_id]
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
    return time.perf_counter() - start, steps


def via_rollbench(flags: dict[str, str], extra: dict[str, str]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as d:
        cfg = config_from_flags({**flags, **extra, "output_dir": d, "resume": "false"})
        start = time.perf_counter()
        with open(os.devnull, "w") as null:
            result = run_eval(cfg, progress_stream=null)
        wall = time.perf_counter() - start
        steps = sum(sum(t["metrics"]["n_steps"]) for t in result.info["per_task"])
    return wall, steps


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

    flags = {**WORKLOADS[args.workload], "eval.n_episodes": str(args.episodes), "eval.max_episodes_rendered": "0",
             "render_device": args.render_device}
    if args.episode_length:
        flags["env.episode_length"] = str(args.episode_length)
    if args.render_quality:
        flags["env.render_quality"] = args.render_quality
    from rollbench.rendering import apply_backend, choose_backend

    apply_backend(choose_backend(args.render_device))  # the ceiling's processes render the same way
    print(f"MUJOCO_GL={os.environ['MUJOCO_GL']}")
    runs = {
        "ceiling": lambda: ceiling(flags, args.workload),
        "continuous": lambda: via_rollbench(flags, {"eval.mode": "continuous"}),
        "continuous-worker": lambda: via_rollbench(flags, {"eval.mode": "continuous", "policy.placement": "worker"}),
        "continuous-driver": lambda: via_rollbench(flags, {"eval.mode": "continuous", "policy.placement": "driver"}),
        "lockstep": lambda: via_rollbench(flags, {"eval.mode": "lockstep", "eval.batch_size": str(args.batch_size)}),
        "lerobot": lambda: lerobot_style(flags, args.batch_size),
    }
    variants = [v.strip() for v in args.variants.split(",")]
    rates: dict[str, list[float]] = {v: [] for v in variants}
    steps_seen: dict[str, int] = {}
    for r in range(args.repeats):
        for v in variants:
            wall, steps = runs[v]()
            rates[v].append(steps / wall)
            steps_seen[v] = steps
            print(f"repeat {r + 1} {v:<10} {steps:>7} steps {wall:7.2f} s {steps / wall:8.0f} steps/s", flush=True)
    if len(set(steps_seen.values())) != 1:
        print(f"WARNING: variants took different step totals: {steps_seen}")
    med = {v: statistics.median(x) for v, x in rates.items()}
    print(f"\nworkload {args.workload}: {args.episodes} episodes x 10 tasks, {cpu_count()} cores, "
          f"median of {args.repeats}")
    for v in variants:
        print(f"  {v:<10} {med[v]:8.0f} env-steps/s")
    for c in (v for v in variants if v.startswith("continuous")):
        for v in (v for v in variants if not v.startswith("continuous")):
            print(f"  {c} / {v} = {med[c] / med[v]:.2f}")


if __name__ == "__main__":
    main()
