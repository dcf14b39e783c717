"""Wall time of one evaluation with 1 and 2 local shard processes, side by side.

    .venv/bin/python bench/shards_wall.py                       # MT10, 10 episodes, median of 3
    .venv/bin/python bench/shards_wall.py --n-episodes=1 --repeats=1   # a quick check

Each timing is a whole `rollbench eval` process (start-up, env creation, merge included),
into a fresh output_dir.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(args: list[str], out: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rollbench", *args, f"--output_dir={out}"],
        capture_output=True, text=True, check=False,
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"rollbench failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mt10")
    parser.add_argument("--n-episodes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shards", default="1,2", help="comma list of shard counts")
    ns = parser.parse_args()
    base = ["eval", "--env.type=metaworld", f"--env.task={ns.task}", "--policy.type=expert",
            f"--eval.n_episodes={ns.n_episodes}"]
    counts = [int(c) for c in ns.shards.split(",")]
    results: dict[int, list[float]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(ns.repeats):
            for n in counts:  # interleaved, so drift on the machine hits every count alike
                args = base if n == 1 else [*base, f"--eval.num_shards={n}", "--executor=shards"]
                results[n].append(wall(args, Path(tmp) / f"n{n}-r{r}"))
                print(f"  repeat {r + 1}/{ns.repeats}, {n} shard(s): {results[n][-1]:.1f} s", file=sys.stderr)
    one = statistics.median(results[counts[0]])
    print(f"{ns.task}, {ns.n_episodes} episodes per task, median of {ns.repeats}:")
    print(f"{'shards':>6}  {'wall s':>8}  {'speed-up':>8}")
    for n in counts:
        med = statistics.median(results[n])
        print(f"{n:>6}  {med:>8.1f}  {one / med:>7.2f}x")


if __name__ == "__main__":
    main()
