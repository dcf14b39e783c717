"""What the schedulers and their planners share of the machine: the cores this process may
use, and the threads a policy in the driver gets beside the env workers. (The policy boundary
they all step through is `rollbench.episode.context`.)"""

from __future__ import annotations

import os


def cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def driver_threads(cores: int, workers: int) -> int:
    """torch intra-op threads for a policy in the driver beside `workers` env workers: the
    cores they leave, at least one (the continuous scheduler sets it, `rollbench tune`
    models it)."""
    return max(1, cores - workers)
