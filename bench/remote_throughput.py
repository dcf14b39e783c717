"""Remote vs in-process policy on one workload, side by side; added latency per step.

    .venv/bin/python bench/remote_throughput.py [--env metaworld|fake] [--episodes N] [--calls N]

1. latency: one RemotePolicy in this process against `rollbench serve` (a thread here) acting on
   a fixed observation, `--calls` times, for 1 and 4 rows per call, minus the same policy's
   time in-process: the added latency per env step (median, p99), each dialect;
2. throughput: `rollbench eval` of the expert in-process (worker placement) and through the
   server (2 workers x 4 slots, openpi dialect, replan_steps=1), env steps per second of
   each, and the server's own counters (rows per call, call and request latency).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def latency(env: str, calls: int) -> dict[str, object]:
    from rollbench.config.policy import PolicyConfig
    from rollbench.episode.context import StepContext
    from rollbench.policies.base import EpisodeStart
    from rollbench.serve import BackgroundServer, build_server

    flags = {"policy.type": "expert", "env.type": env, "port": "0", "serve.max_wait_ms": "0"}
    if env == "metaworld":
        flags["env.task"] = "push-v3"
    server, served = build_server(flags)
    bg = BackgroundServer(server)
    bg.start()
    bench = server.benchmark
    task = next(t for names in bench.tasks().values() for t in names)
    e = bench.make_task_env(task)
    obs, _ = e.reset(seed=0)
    out: dict[str, object] = {}
    try:
        for rows in (1, 4):
            batched = {k: np.stack([np.asarray(v)] * rows) for k, v in obs.items()} if isinstance(obs, dict) else np.stack([obs] * rows)
            pre, _ = bench.get_env_processors()
            batch = pre(bench.to_features(batched))
            batch["task"] = [bench.task_description(task)] * rows
            starts = [EpisodeStart("g", task, "", i, i) for i in range(rows)]
            slots = list(range(rows))
            local = StepContext(bench, PolicyConfig(type="expert")).make_policy()
            local.reset(slots, starts)
            t_local = []
            for _ in range(calls):
                t0 = time.perf_counter()
                local.act(batch, slots)
                t_local.append(time.perf_counter() - t0)
            for protocol in ("openpi", "vla-eval"):
                cfg = PolicyConfig(type="remote", options={"url": bg.url, "protocol": protocol, "replan_steps": "1"})
                remote = StepContext(bench, cfg).make_policy()
                remote.reset(slots, starts)
                t_remote = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    remote.act(batch, slots)
                    t_remote.append(time.perf_counter() - t0)
                remote.close()
                added = [(r - statistics.median(t_local)) * 1000 for r in t_remote]
                out[f"{protocol} rows={rows}"] = {
                    "added_ms_median": round(_pct(added, 50), 3), "added_ms_p99": round(_pct(added, 99), 3),
                    "in_process_ms_median": round(statistics.median(t_local) * 1000, 4),
                }
    finally:
        e.close()
        bg.stop()
        served.close()
    return out


def throughput(env: str, episodes: int) -> dict[str, object]:
    from rollbench.cli import main
    from rollbench.serve import BackgroundServer, build_server

    env_flags = ["--env.type=metaworld", "--env.task=mt10"] if env == "metaworld" else ["--env.type=fake", "--env.max_steps=200"]
    common = [*env_flags, f"--eval.n_episodes={episodes}", "--eval.max_episodes_rendered=0", "--eval.report=false",
              "--workers=2", "--slots_per_worker=4", "--resume=false"]
    serve_flags = {"policy.type": "expert", "port": "0", "serve.max_wait_ms": "2"}
    serve_flags.update({f.split("=")[0][2:]: f.split("=")[1] for f in env_flags})
    server, served = build_server(serve_flags)
    bg = BackgroundServer(server)
    bg.start()
    out: dict[str, object] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, policy in (("in-process", ["--policy.type=expert"]),
                                 ("remote", ["--policy.type=remote", f"--policy.url={bg.url}", "--policy.replan_steps=1"])):
                t0 = time.perf_counter()
                rc = main(["eval", *common, *policy, f"--output_dir={Path(tmp) / name}"])
                wall = time.perf_counter() - t0
                info = json.loads((Path(tmp) / name / "eval_info.json").read_text())
                steps = sum(sum(t["metrics"]["n_steps"]) for t in info["per_task"])
                out[name] = {"rc": rc, "wall_s": round(wall, 2), "env_steps": steps, "steps_per_s": round(steps / wall, 1),
                             "pc_success": info["overall"]["pc_success"]}
        out["server"] = server.stats.snapshot()
    finally:
        bg.stop()
        served.close()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="metaworld", choices=["metaworld", "fake"])
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    result = {"latency": latency(args.env, args.calls), "throughput": throughput(args.env, args.episodes)}
    json.dump(result, sys.stdout, indent=2)
    print()
