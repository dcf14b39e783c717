"""When this process reached the moments a user waits for, in seconds since it started.

    process start (the kernel's clock, /proc/self/stat)
      -> "checkpoint_resolved"  a hub id resolved to its commit (downloaded if needed)
      -> "lerobot_imported"     torch and the checkpoint type's LeRobot modules imported
      -> "policy_checked"       its config and features checked against the benchmark
      -> "policy_ready"         the policy can act (its weights and processors loaded)
      -> "first_env_step"       the first actions were handed to an env

`rollbench eval` writes them to eval_info.json (`startup`), so that the time to the first
env step is a figure a benchmark can read (bench/vs_lerobot.py) rather than a feeling.
Each moment is recorded once, the first time it happens; marking costs a dict lookup.
"""

from __future__ import annotations

import os
import time

_marks: dict[str, float] = {}
_imported_at = time.time()


def process_start() -> float:
    """Unix time at which this process started (when this module was imported where the
    kernel does not say)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5): start time after boot, in clock ticks
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _imported_at


def mark(name: str) -> None:
    if name not in _marks:
        _marks[name] = time.time()


def startup() -> dict[str, float] | None:
    """{moment: seconds after the process started}, or None before the first env step."""
    if "first_env_step" not in _marks:
        return None
    t0 = process_start()
    return {name: round(t - t0, 3) for name, t in sorted(_marks.items(), key=lambda kv: kv[1])}
