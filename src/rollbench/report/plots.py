"""The charts of report.html and compare's page, as SVG text to inline.

matplotlib's object API (`Figure`, no pyplot): nothing global is touched, so a program
that calls `write_report` keeps its own backend and figures. Text stays text in the SVG
(`svg.fonttype: none`): a quarter of the size of glyph paths, and searchable. Element ids
get a per-chart prefix, because several SVGs inlined in one page share one id space.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rollbench.caches import keep_matplotlib_in_cache
from rollbench.stats import wilson

# before any matplotlib import (each chart imports it lazily): its font cache goes to rollbench's
# cache folder, not ~/.cache/matplotlib
keep_matplotlib_in_cache()

SUCCESS = "#2b8a3e"
FAILURE = "#c92a2a"
NEUTRAL = "#868e96"
ACCENT = "#1864ab"

# Any: matplotlib types rc_context() with a Literal of every rc key, which a plain dict is not
_RC: Any = {
    "svg.fonttype": "none",
    "svg.hashsalt": "rollbench",  # ids from a fixed salt: the same run gives the same page
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_ids = itertools.count()


def to_svg(fig: Any) -> str:
    """The figure as an `<svg>` element: no XML prolog, no metadata, ids made unique."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    prefix = f"c{next(_ids)}-"
    text = re.sub(r'\bid="', f'id="{prefix}', text)
    text = re.sub(r"url\(#", f"url(#{prefix}", text)
    return re.sub(r'href="#', f'href="#{prefix}', text)


def _figure(height: float, left: float = 0.6, right: float = 0.2, width: float = 7.0) -> Any:
    """A figure with fixed margins in inches: a layout engine would cost a third of the
    report's time (measured: ~0.1 s a chart), and our labels' sizes are known."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn
    from matplotlib.figure import Figure  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=0.45 / height, top=1 - 0.15 / height)
    return fig


def _label_width(labels: Sequence[str]) -> float:
    """Inches a column of 9-pt tick labels takes, plus the tick and a gap."""
    return 0.25 + 0.07 * max((len(x) for x in labels), default=4)


@dataclass(frozen=True)
class Bar:
    name: str
    k: int
    n: int
    ci: tuple[float, float] | None = None  # the run's own interval (a stopped task's exact one), else Wilson


def success_bars(bars: Sequence[Bar]) -> str:
    """Per-task success (%) with 95% Wilson whiskers, best task on top."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    shown = sorted((b for b in bars if b.n), key=lambda b: (b.k / b.n, b.name))
    labels = [f"{b.name}  {b.k}/{b.n}" for b in shown]
    fig = _figure(0.75 + 0.22 * len(shown), left=_label_width(labels))
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        rates = np.array([100 * b.k / b.n for b in shown])
        cis = [b.ci or wilson(b.k, b.n) or (0.0, 0.0) for b in shown]
        err = np.array([[r - 100 * lo for r, (lo, _) in zip(rates, cis, strict=True)],
                        [100 * hi - r for r, (_, hi) in zip(rates, cis, strict=True)]])
        y = np.arange(len(shown))
        colors = [SUCCESS if r >= 50 else FAILURE for r in rates]
        ax.barh(y, rates, color=colors, alpha=0.8, height=0.7)
        ax.errorbar(rates, y, xerr=err, fmt="none", ecolor="#212529", elinewidth=1, capsize=2)
        ax.set_yticks(y, labels)
        ax.set_ylim(-0.6, len(shown) - 0.4)
        ax.set_xlim(0, 100)
        ax.set_xlabel("success % (whiskers: 95% interval)")
        ax.grid(axis="x", alpha=0.3)
    return to_svg(fig)


def length_histogram(success_steps: Sequence[int], failure_steps: Sequence[int]) -> str:
    """Episode lengths of successes and of failures, on shared bins."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    fig = _figure(2.6)
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        everything = [*success_steps, *failure_steps]
        lo, hi = min(everything), max(everything)
        bins = np.linspace(lo, hi + 1, min(40, hi - lo + 2))  # integer lengths: at most one bin per step
        for steps, color, label in ((success_steps, SUCCESS, "successes"), (failure_steps, FAILURE, "failures")):
            if steps:
                ax.hist(steps, bins=bins, color=color, alpha=0.6, label=f"{label} ({len(steps)})")
        ax.set_xlabel("episode length (steps)")
        ax.set_ylabel("episodes")
        ax.legend(frameon=False)
    return to_svg(fig)


@dataclass(frozen=True)
class Span:
    start: float  # unix time the episode began
    end: float  # unix time it ended
    worker: str  # (writer, worker): who ran it


@dataclass(frozen=True)
class Activity:
    edges: np.ndarray  # bin edges of the rate, seconds since the first start
    rate: np.ndarray  # episodes finished per second in each bin
    grid: np.ndarray  # sample times of `busy`
    busy: np.ndarray  # workers running an episode at each sample time
    workers: int


def activity(spans: Sequence[Span], points: int = 400) -> Activity:
    """Episodes/s and busy workers over the run, from each episode's start and end."""
    t0 = min(s.start for s in spans)
    length = max(max(s.end for s in spans) - t0, 1e-3)
    # a rate needs several completions per bin to be more than 0-or-spike noise
    n_bins = max(5, min(100, len(spans) // 8))
    counts, edges = np.histogram([s.end - t0 for s in spans], bins=n_bins, range=(0.0, length))
    grid = np.linspace(0.0, length, points)
    busy = np.zeros(points)
    by_worker: dict[str, list[Span]] = {}
    for s in spans:
        by_worker.setdefault(s.worker, []).append(s)
    for own in by_worker.values():
        # a worker with several slots counts once: add up its coverage, then clip to 1
        cover = np.zeros(points + 1)
        np.add.at(cover, np.searchsorted(grid, [s.start - t0 for s in own], side="left"), 1)
        np.add.at(cover, np.searchsorted(grid, [s.end - t0 for s in own], side="right"), -1)
        busy += np.cumsum(cover)[:points] > 0
    return Activity(edges, counts / (edges[1] - edges[0]), grid, busy, len(by_worker))


def throughput(spans: Sequence[Span]) -> str:
    """Episodes finished per second and busy workers, over the run's time."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    act = activity(spans)
    fig = _figure(2.6, right=0.6)
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        ax.stairs(act.rate, act.edges, color=ACCENT, linewidth=1.5, label="episodes/s")
        ax.set_xlabel("time since the first episode began (s)")
        ax.set_ylabel("episodes/s", color=ACCENT)
        ax.set_ylim(bottom=0)
        right = ax.twinx()
        right.spines["right"].set_visible(True)
        right.step(act.grid, act.busy, where="post", color=NEUTRAL, label="busy workers")
        right.set_ylabel("busy workers", color=NEUTRAL)
        right.set_ylim(0, max(1, act.workers) + 0.5)
        right.yaxis.get_major_locator().set_params(integer=True)
    return to_svg(fig)


@dataclass(frozen=True)
class Difference:
    name: str
    diff: float  # B - A, percentage points
    lo: float
    hi: float
    verdict: str  # better | worse | other


def differences(rows: Sequence[Difference]) -> str:
    """B - A per task with its interval (the one that agrees with its test); colour says what the test concluded."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    fig = _figure(0.75 + 0.22 * len(rows), left=_label_width([r.name for r in rows]))
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
        y = np.arange(len(rows))[::-1]
        for yi, r in zip(y, rows, strict=True):
            color = {"better": SUCCESS, "worse": FAILURE}.get(r.verdict, NEUTRAL)
            ax.plot([r.lo, r.hi], [yi, yi], color=color, linewidth=2)
            ax.plot([r.diff], [yi], "o", color=color, markersize=4)
        ax.axvline(0, color="#212529", linewidth=0.8)
        ax.set_yticks(y, [r.name for r in rows])
        ax.set_xlim(-100, 100)
        ax.set_xlabel("B - A, success percentage points (interval that agrees with the test)")
        ax.grid(axis="x", alpha=0.3)
    return to_svg(fig)


@dataclass(frozen=True)
class Narrowing:
    name: str
    successes: Sequence[bool]  # the counted episodes, in episode order
    looks: Sequence[int]  # prefix lengths the stop rule looked at
    stopped_at: int | None  # where the task stopped (None: not decided)
    reason: str


def narrowing(tasks: Sequence[Narrowing], ci_width: float, max_episodes: int, columns: int = 5) -> str:
    """Adaptive runs: each task's 95% Wilson interval after each look of the stop rule, and
    where the task stopped (small multiples on shared axes)."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    rows = -(-len(tasks) // columns)
    cols = min(columns, len(tasks))
    fig = _figure(0.7 + 1.45 * rows, left=0.55, width=min(7.0, 1.2 + 1.45 * cols))
    with matplotlib.rc_context(_RC):
        axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
        for ax in axes.flat[len(tasks):]:
            ax.set_visible(False)
        for ax, t in zip(axes.flat, tasks, strict=False):
            ks = [k for k in t.looks if k <= len(t.successes)]
            cum = np.cumsum(np.asarray(t.successes, dtype=float))
            bounds = [wilson(int(cum[k - 1]), k) or (0.0, 1.0) for k in ks]
            lo = [100 * b[0] for b in bounds]
            hi = [100 * b[1] for b in bounds]
            ax.fill_between(ks, lo, hi, color=ACCENT, alpha=0.25, linewidth=0)
            ax.vlines(ks, lo, hi, color=ACCENT, linewidth=1.5)  # a task stopped at its first look has no band
            ax.plot(ks, [100 * cum[k - 1] / k for k in ks], color=ACCENT, marker=".", markersize=3, linewidth=1)
            if t.stopped_at is not None:
                color = SUCCESS if t.reason == "ci_width" else NEUTRAL
                ax.axvline(t.stopped_at, color=color, linestyle="--", linewidth=1)
            ax.set_title(t.name if len(t.name) <= 22 else t.name[:21] + "…", fontsize=8)
            ax.set_xlim(0, max_episodes)
            ax.set_ylim(0, 100)
            ax.grid(alpha=0.3)
        for ax in axes[-1]:
            ax.set_xlabel("episodes")
        for ax in axes[:, 0]:
            ax.set_ylabel("success %")
        fig.subplots_adjust(hspace=0.45, wspace=0.15, top=1 - 0.3 / (0.7 + 1.45 * rows))
    return to_svg(fig)


@dataclass(frozen=True)
class Level:
    level: float
    pct: float | None  # success %, None when no episode finished
    ci: tuple[float, float] | None  # its 95% interval, percent
    control: bool = False


def degradation(axes: dict[str, Sequence[Level]], columns: int = 4) -> str:
    """A sweep: per axis, success (%) with its 95% interval against the axis's level, the
    control at the axis's rest level (small multiples on a shared success scale)."""
    import matplotlib  # heavy: matplotlib (~0.1-0.3 s); loaded only when a chart is drawn

    rows = -(-len(axes) // columns)
    cols = min(columns, len(axes))
    height = 0.75 + 1.75 * rows
    fig = _figure(height, left=0.55, width=min(7.0, 1.0 + 1.75 * cols))
    with matplotlib.rc_context(_RC):
        grid = fig.subplots(rows, cols, sharey=True, squeeze=False)
        for ax in grid.flat[len(axes):]:
            ax.set_visible(False)
        for ax, (name, levels) in zip(grid.flat, axes.items(), strict=False):
            shown = [(p.level, p.pct, p.ci or (p.pct, p.pct), p.control) for p in levels if p.pct is not None]
            ax.plot([s[0] for s in shown], [s[1] for s in shown], color=ACCENT, linewidth=1.2)
            for level, pct, (lo, hi), control in shown:
                ax.errorbar([level], [pct], yerr=[[pct - lo], [hi - pct]], fmt="o", color=NEUTRAL if control else ACCENT,
                            markersize=4, elinewidth=1, capsize=2)
            ax.set_title(name, fontsize=8)
            ax.set_xlabel("level")
            ax.set_xticks(sorted({p.level for p in levels}))
            ax.set_ylim(0, 102)
            ax.grid(alpha=0.3)
        for ax in grid[:, 0]:
            ax.set_ylabel("success %")
        fig.subplots_adjust(hspace=0.6, wspace=0.15, top=1 - 0.3 / height, bottom=0.45 / height)
    return to_svg(fig)
