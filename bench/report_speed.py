"""How long `rollbench report` takes on MT10 x 10 episodes: cold (a fresh process, matplotlib's
import included) and warm (the same process again), medians of repeated runs.

    .venv312/bin/python bench/report_speed.py [--repeats 5] [--dir DIR]

It first runs `rollbench eval` of MetaWorld MT10 with the scripted experts, 10 episodes per
task, videos off (into DIR, default a temporary directory; an existing complete run there is
reused), then times `report.write_report(DIR)` in `--repeats` fresh processes. Measured once on
a quiet 2-core machine: 0.6 s cold, 0.15 s warm (this was a timed test before; under load it
took 2.15 s and failed, so the timing lives here).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TIMED = ("import time; t = time.perf_counter(); from rollbench.report import write_report; p = write_report({run!r}); "
         "a = time.perf_counter() - t; t = time.perf_counter(); write_report({run!r}); "
         "print(a, time.perf_counter() - t, p.stat().st_size)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    run = args.dir or Path(tempfile.mkdtemp(prefix="report-speed-"))
    if not (run / "eval_info.json").exists():
        subprocess.run([sys.executable, "-m", "rollbench", "eval", "--env.type=metaworld", "--env.task=mt10",
                        "--policy.type=expert", "--eval.n_episodes=10", "--eval.max_episodes_rendered=0",
                        "--eval.report=false", f"--output_dir={run}"], check=True, stdout=subprocess.DEVNULL)
    cold, warm, sizes = [], [], []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", TIMED.format(run=str(run))], capture_output=True, text=True,
                             check=True).stdout.split()
        cold.append(float(out[0]))
        warm.append(float(out[1]))
        sizes.append(int(out[2]))
    print(f"report.html of MT10 x 10 ({sizes[-1] / 1e3:.0f} kB), {args.repeats} fresh processes:")
    print(f"  cold (import included): median {statistics.median(cold):.3f} s  (min {min(cold):.3f}, max {max(cold):.3f})")
    print(f"  warm:                   median {statistics.median(warm):.3f} s  (min {min(warm):.3f}, max {max(warm):.3f})")


if __name__ == "__main__":
    main()
