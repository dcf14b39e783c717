"""What `--eval.recording` costs: the same run with and without it, interleaved, medians.

    python bench/recording.py --repeats 3
    python bench/recording.py --workload pusht-pixels --repeats 5

Each repeat runs the workload twice in a row, without and with `--eval.recording=true`, as
fresh `rollbench eval` processes into fresh directories (videos and report off), and times the
whole command: start-up, the episodes, writing each episode's dataset part and the final join.
Prints each pair and the medians, with their ratio. Machines here are shared: read the ratio,
and run it where nothing else runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = {
    # millisecond envs and no policy cost: the fixed costs of recording show in full
    "mt10-expert": ["--env.type=metaworld", "--env.task=mt10", "--policy.type=expert", "--eval.n_episodes=5"],
    "pusht-pixels": ["--env.type=pusht", "--env.obs_type=pixels_agent_pos", "--policy.type=random",
                     "--eval.n_episodes=10", "--env.episode_length=100"],
}


def run(args: list[str], out: Path, record: bool) -> float:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "rollbench", "eval", *args, "--eval.max_episodes_rendered=0", "--eval.report=false",
           f"--eval.recording={'true' if record else 'false'}", f"--output_dir={out}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollbench-bench-rec-") as tmp:
        for name in opts.workload or sorted(WORKLOADS):
            plain, recorded = [], []
            for i in range(opts.repeats):
                plain.append(run(WORKLOADS[name], Path(tmp) / "plain", False))
                recorded.append(run(WORKLOADS[name], Path(tmp) / "rec", True))
                print(f"{name} #{i + 1}: without {plain[-1]:.2f} s, with recording {recorded[-1]:.2f} s", flush=True)
            a, b = statistics.median(plain), statistics.median(recorded)
            print(f"{name}: median without {a:.2f} s, with {b:.2f} s: recording costs {b / a:.2f}x the run (+{b - a:.1f} s)")


if __name__ == "__main__":
    main()
