"""Peak memory per env worker: runs an evaluation and reads each worker's own report.

    python bench/memory.py --env.task=mt10 --eval.n_episodes=3       (MetaWorld state, expert)

Every worker writes `peak RSS N MiB` (getrusage ru_maxrss) to `logs/worker-<i>.log` when it
stops; the driver's own peak is printed beside it.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    flags = {"--env.type": "metaworld", "--env.task": "mt10", "--policy.type": "expert", "--eval.n_episodes": "3"}
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        flags[key] = value
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "rollbench", "eval", *(f"{k}={v}" for k, v in flags.items()), f"--output_dir={d}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        peaks = []
        for log in sorted(Path(d, "logs").glob("worker-*.log")):
            peaks += [float(m) for m in re.findall(r"peak RSS (\d+) MiB", log.read_text())]
    driver = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(" ".join(f"{k}={v}" for k, v in flags.items()))
    print(f"workers: {len(peaks)}; peak RSS per worker (MiB): {', '.join(f'{p:.0f}' for p in peaks)}")
    print(f"largest child process (driver or worker) peak RSS: {driver:.0f} MiB")


if __name__ == "__main__":
    main()
