"""A progress line that tells the truth: episodes done/total, success so far, rate, ETA.

On a terminal it redraws one line on stderr; otherwise it logs a plain line every few
seconds, so CI logs and `nohup` files stay readable.

Its success figure is the one the closing table's `overall` row is built like: a fixed run's
pooled rate (every task runs the same episodes); an adaptive run's mean of its tasks' rates
(`--eval.ci_width` and `--eval.versus` stop tasks after different numbers of episodes, and
pooling would weigh the tasks that ran longer more: 55.5% pooled beside 72.2% in issue 47),
labelled as such. In a sweep, as in the table, the tasks are the control's. An adaptive
run counts, as its table does, only each task's counted prefix: an episode that finished
before its task's stop was known and lies past it (`--eval.ci_width` with several workers)
leaves the count when the stop comes (`counts`, the run's `Stops.wanted`), so the last line
reads 110/110, not 113/110.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TextIO

from rollbench.results.records import EpisodeRecord


def _fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    def __init__(
        self, total: int, already: int = 0, stream: TextIO | None = None, every_s: float = 5.0,
        counts: Callable[[EpisodeRecord], bool] | None = None,
    ) -> None:
        """`counts`: an adaptive run's `Stops.wanted` (None: a fixed run)."""
        self.total = total
        self.done = already
        self.already = already
        self.success = 0
        self.failed = 0
        self.steps = 0
        self.ran = 0  # episodes this process finished, counted or not (the rate)
        # an adaptive run's episodes, recounted when a task stops (`counts`: still counted?)
        self.counts = counts
        # adaptive: tasks may stop early, so the total is a bound until they do
        self.at_most = counts is not None
        self._seen: list[EpisodeRecord] = []
        # an adaptive run's per-task counts of this process's episodes: [successes, finished ok]
        self.by_task: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.start = time.monotonic()
        self._last = 0.0
        self._drawn = already  # the episodes the last line drawn counted

    def update(self, rec: EpisodeRecord) -> None:
        self.ran += 1
        self.steps += rec.n_steps
        if self.counts is not None:
            self._seen.append(dataclasses.replace(rec, frames=None))
        self._add(rec)
        now = time.monotonic()
        if self.tty or now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            self._draw(now)

    def _add(self, rec: EpisodeRecord) -> None:
        self.done += 1
        self.success += rec.ok and rec.success
        self.failed += not rec.ok
        if rec.ok and not rec.condition:  # a sweep's table is its control's
            counts = self.by_task[(rec.task_group, rec.task_id)]
            counts[0] += bool(rec.success)
            counts[1] += 1

    def set_total(self, total: int) -> None:
        """An adaptive run's task stopped: fewer episodes are left to do, and those past the
        stop that finished already no longer count."""
        self.total = total
        if self.counts is not None:
            self.done, self.success, self.failed = self.already, 0, 0
            self.by_task.clear()
            for rec in self._seen:
                if self.counts(rec):
                    self._add(rec)

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self.start
        finished_ok = self.done - self.already - self.failed
        rate = self.ran / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else None
        succ = self.success_text(finished_ok)
        parts = [
            f"episodes {self.done}/{'<=' if self.at_most and self.done < self.total else ''}{self.total}",
            f"success {succ}",
            f"{rate:.2f} ep/s",
            f"{self.steps / elapsed:.0f} steps/s" if elapsed > 0 else "",
            f"ETA {_fmt_s(eta)}" if eta is not None else "ETA -",
        ]
        if self.failed:
            parts.append(f"failed {self.failed}")
        return " | ".join(p for p in parts if p)

    def success_text(self, finished_ok: int) -> str:
        """The success so far: pooled in a fixed run; in an adaptive one, the mean of the
        tasks' rates (what its closing `overall` row is a mean of), said so."""
        if not self.at_most:
            return f"{100.0 * self.success / finished_ok:.1f}%" if finished_ok else "-"
        rates = [k / n for k, n in self.by_task.values() if n]
        if not rates:
            return "-"
        of = f"mean of {len(rates)} tasks' k/n" if len(rates) > 1 else "k/n"
        return f"{100.0 * sum(rates) / len(rates):.1f}% ({of})"

    def _draw(self, now: float) -> None:
        self._drawn = self.done
        if self.tty:
            self.stream.write("\r\033[K" + self.line(now))
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Ends the line on a terminal; in a log, draws the last count if no line showed it
        (lines there come every `every_s`: an adaptive run's total shrinks as tasks stop, so
        its last episode need not be the total it last had)."""
        if not self.tty and self.done != self._drawn:
            self._draw(time.monotonic())
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
