"""Per-episode results of bench/throughput.py's workloads, as a digest to compare across commits.

    python bench/episode_digest.py --out a.json          # on one commit
    python bench/episode_digest.py --out b.json --compare a.json   # on another: equal or not, per workload

A change to the engine (the lifecycle, the schedulers, the executors) must leave every
episode of every workload as it was: this runs each workload small (MT10 x 3 episodes;
pixels: 2 episodes of 20 steps), in the modes that differ in code path, and records every
(task group, task id, episode, success, sum reward, max reward, steps, seed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_policies import WORKLOADS

CASES = [
    ("mt10-expert", {"eval.mode": "continuous"}, 3),
    ("mt10-expert", {"eval.mode": "lockstep", "eval.batch_size": "3"}, 3),
    ("mt10-mlp", {"eval.mode": "continuous"}, 3),
    ("mt10-pixels", {"eval.mode": "continuous", "env.episode_length": "20"}, 2),
]


def episodes(workload: str, extra: dict[str, str], n: int) -> list[list[object]]:
    import dataclasses

    from rollbench.cli import main
    from rollbench.config.eval import EvalConfig

    with tempfile.TemporaryDirectory() as d:
        flags = {**WORKLOADS[workload], **extra, "eval.n_episodes": str(n), "eval.max_episodes_rendered": "0",
                 "output_dir": d, "resume": "false"}
        if "report" in {f.name for f in dataclasses.fields(EvalConfig)}:  # commits before report.html lack it
            flags["eval.report"] = "false"
        with open(os.devnull, "w") as null:
            stdout, sys.stdout = sys.stdout, null
            try:
                rc = main(["eval", *(f"--{k}={v}" for k, v in flags.items())])
            finally:
                sys.stdout = stdout
        if rc != 0:
            raise SystemExit(f"{workload} {extra}: rollbench eval exited {rc}")
        info = json.loads((Path(d) / "eval_info.json").read_text())
    out = []
    for t in info["per_task"]:
        m = t["metrics"]
        for i, ep in enumerate(m["episode_ix"]):
            out.append([t["task_group"], t["task_id"], ep, m["successes"][i], m["sum_rewards"][i], m["max_rewards"][i],
                        m["n_steps"][i], m["seeds"][i]])
    return out


def main() -> None:
    warnings.filterwarnings("ignore")
    os.environ["PYTHONWARNINGS"] = "ignore::UserWarning"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="where the episodes go (JSON)")
    ap.add_argument("--compare", help="an earlier --out file: say per workload whether every episode is equal")
    args = ap.parse_args()
    results = {f"{w} {json.dumps(e, sort_keys=True)}": episodes(w, e, n) for w, e, n in CASES}
    Path(args.out).write_text(json.dumps(results))
    old = json.loads(Path(args.compare).read_text()) if args.compare else None
    for key, eps in results.items():
        digest = hashlib.sha256(json.dumps(eps).encode()).hexdigest()[:16]
        same = "" if old is None else ("  equal" if old.get(key) == eps else "  DIFFERENT")
        print(f"{key:<60} {len(eps):>3} episodes  {digest}{same}")


if __name__ == "__main__":
    main()
