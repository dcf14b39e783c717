"""A progress line that tells the truth: episodes done/total, success so far, rate, ETA.

On a terminal it redraws one line on stderr; otherwise it logs a plain line every few
seconds, so CI logs and `nohup` files stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rollbench.results.records import EpisodeRecord


def _fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    def __init__(
        self, total: int, already: int = 0, stream: TextIO | None = None, every_s: float = 5.0, at_most: bool = False,
    ) -> None:
        self.total = total
        self.at_most = at_most  # adaptive: tasks may stop early, so the total is a bound until they do
        self.done = already
        self.already = already
        self.success = 0
        self.failed = 0
        self.steps = 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, rec: EpisodeRecord) -> None:
        self.done += 1
        self.success += rec.ok and rec.success
        self.failed += not rec.ok
        self.steps += rec.n_steps
        now = time.monotonic()
        if self.tty or now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            self._draw(now)

    def set_total(self, total: int) -> None:
        """An adaptive run's task stopped: fewer episodes are left to do."""
        self.total = total

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self.start
        new = self.done - self.already
        finished_ok = new - self.failed
        rate = new / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else None
        succ = f"{100.0 * self.success / finished_ok:.1f}%" if finished_ok else "-"
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

    def _draw(self, now: float) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line(now))
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
