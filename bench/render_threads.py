"""Software-GL frames/s by process layout: P processes rendering at once, llvmpipe threads each.

    python bench/render_threads.py --procs 1,2 --threads default,1,2 --backends egl,osmesa

Mesa's llvmpipe rasterises with LP_NUM_THREADS threads per GL context (default: one per
online CPU), so P rendering processes on C cores run P*C render threads plus P simulation
threads. Each child builds one MetaWorld env (256x256 `pixels_agent_pos`, default render
quality), renders a warm-up, reports ready; when all are ready they step (random actions,
one frame per step) for `--steps` steps at the same time. Build + warm-up and steady state
are reported separately; frames/s is the sum over processes of steps / steady-state wall.
CPU ms/frame (process CPU time of all threads per step) does not depend on the share of the
cores other jobs leave, which wall-clock rates do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def child(task: str, steps: int, warmup: int, size: int, quality: str) -> None:
    import numpy as np

    from rollbench.benchmarks.metaworld import MetaWorldConfig

    t0 = time.perf_counter()
    cfg = MetaWorldConfig(task=task, obs_type="pixels_agent_pos", observation_width=size, observation_height=size,
                          render_quality=quality)  # type: ignore[arg-type]
    env = cfg.make_task_env(task)
    rng = np.random.default_rng(0)
    env.reset(seed=1000)
    for _ in range(warmup):
        env.step(rng.uniform(-1, 1, 4).astype(np.float32))
    build_s = time.perf_counter() - t0
    print("ready", flush=True)
    sys.stdin.readline()  # go
    t1, c1 = time.perf_counter(), time.process_time()  # CPU of all threads, llvmpipe's included
    for i in range(steps):
        _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
        if term or trunc or (i + 1) % 50 == 0:
            env.reset(seed=1001 + i)
    steady_s, cpu_s = time.perf_counter() - t1, time.process_time() - c1
    env.close()
    print(json.dumps({"build_s": build_s, "steady_s": steady_s, "cpu_s": cpu_s, "steps": steps}), flush=True)


def run_layout(procs: int, threads: str, backend: str, args: argparse.Namespace) -> dict[str, float]:
    env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend, PYTHONWARNINGS="ignore")
    env.pop("LP_NUM_THREADS", None)
    if threads != "default":
        env["LP_NUM_THREADS"] = threads
    cmd = [sys.executable, __file__, "--child", "--task", args.task, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--size", str(args.size), "--quality", args.quality]
    kids = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    for k in kids:
        assert k.stdout is not None
        line = k.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"child failed before ready: {line!r}")
    t0 = time.perf_counter()
    for k in kids:
        assert k.stdin is not None
        k.stdin.write("go\n")
        k.stdin.flush()
    results = [json.loads(k.communicate()[0].strip().splitlines()[-1]) for k in kids]
    wall = time.perf_counter() - t0
    return {
        "fps": sum(r["steps"] for r in results) / wall,
        "fps_per_proc": statistics.mean(r["steps"] / r["steady_s"] for r in results),
        "build_s": statistics.mean(r["build_s"] for r in results),
        "cpu_ms": 1000 * sum(r["cpu_s"] for r in results) / sum(r["steps"] for r in results),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--task", default="push-v3")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--quality", default="default", help="metaworld render quality: default|fast")
    ap.add_argument("--procs", default="1,2")
    ap.add_argument("--threads", default="default,1,2", help="LP_NUM_THREADS values; `default` leaves it unset")
    ap.add_argument("--backends", default="egl,osmesa")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.child:
        child(args.task, args.steps, args.warmup, args.size, args.quality)
        return
    from rollbench.rendering import osmesa_loadable

    backends = [b for b in args.backends.split(",") if b != "osmesa" or osmesa_loadable()]
    layouts = [(int(p), t, b) for b in backends for p in args.procs.split(",") for t in args.threads.split(",")]
    seen: dict[tuple[int, str, str], list[dict[str, float]]] = {lay: [] for lay in layouts}
    print(f"{os.cpu_count()} CPUs, {args.size}x{args.size} {args.quality}, task {args.task}, {args.steps} steps/proc; "
          f"backends {backends}", flush=True)
    for r in range(args.repeats):  # interleaved: load from other jobs hits every layout alike
        for lay in layouts:
            out = run_layout(*lay, args)
            seen[lay].append(out)
            print(f"repeat {r + 1} procs={lay[0]} LP_NUM_THREADS={lay[1]:<7} {lay[2]:<6} "
                  f"{out['fps']:6.1f} frames/s ({out['fps_per_proc']:5.1f}/proc) {out['cpu_ms']:6.1f} CPU ms/frame "
                  f"build+warm-up {out['build_s']:.1f} s",
                  flush=True)
    print("\nmedians")
    for lay, outs in seen.items():
        fps = statistics.median(o["fps"] for o in outs)
        per = statistics.median(o["fps_per_proc"] for o in outs)
        cpu = statistics.median(o["cpu_ms"] for o in outs)
        print(f"  procs={lay[0]} LP_NUM_THREADS={lay[1]:<7} {lay[2]:<6} {fps:6.1f} frames/s total, {per:5.1f} per process, "
              f"{cpu:6.1f} CPU ms/frame")


if __name__ == "__main__":
    main()
