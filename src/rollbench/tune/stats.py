"""Robust statistics for short, repeated measurements on a machine others share.

A probe window that another process preempted is an outlier, not a sample of the run:
the run lasts many windows and sees the machine's typical state. So the probe repeats
short windows and keeps the middle of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

#: share of the samples dropped at each end (the middle 60% kept)
TRIM = 0.2


def trimmed_mean(xs: Sequence[float]) -> float:
    """Mean of the samples left when the lowest and the highest TRIM share are dropped.

    Fewer than 4 samples give their median (with 3, one outlier must not move the result);
    no samples give 0.0.
    """
    vals = sorted(float(x) for x in xs)
    n = len(vals)
    if n < 4:
        return median(vals)
    k = math.floor(n * TRIM)
    kept = vals[k : n - k]
    return sum(kept) / len(kept)


def median(xs: Sequence[float]) -> float:
    """The median; no samples give 0.0."""
    return statistics.median(float(x) for x in xs) if len(xs) else 0.0


def relative_spread(xs: Sequence[float]) -> float:
    """(upper quartile - lower quartile) / median: how much the windows disagree."""
    vals = sorted(float(x) for x in xs)
    if len(vals) < 2:
        return 0.0
    mid = median(vals)
    lo = vals[math.floor((len(vals) - 1) * 0.25)]
    hi = vals[math.ceil((len(vals) - 1) * 0.75)]
    return (hi - lo) / mid if mid > 0 else 0.0
