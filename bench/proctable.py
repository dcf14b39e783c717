"""The process table from /proc (Linux), for the bench scripts that meter CPU time."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, CPU seconds used so far, user + system)} of every live process."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it exited between the listing and the read
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return stats
