"""A run's drive: every record its executor yields is logged durably (unless the executor
logs it itself), then counted; the progress line follows.

    executor.execute(run) ──record──▶ past its task's stop? dropped (an adaptive run)
        ──▶ a recording: its frames written as a dataset part first (results/dataset.py)
        ──▶ the durable log (fsync'ed: from here on it counts) ──▶ the stop rule ──▶ progress

Ctrl-C stops the executor and says how many episodes are saved and how to resume; a full
disk stops the workers and is reported by the lifecycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from rollbench.errors import RunInterrupted
from rollbench.executors.base import Executor, Run
from rollbench.plan import pending
from rollbench.progress import Progress
from rollbench.results.log import LogTail
from rollbench.results.merge import read_merged
from rollbench.results.records import EpisodeRecord
from rollbench.results.sink import RecordSink

log = logging.getLogger(__name__)


def drive(run: Run, executor: Executor, progress_stream: Any) -> int:
    """Every record the executor yields: made durable by the executor's sink (this process's
    episode log; nothing for a shard launcher, whose children log), then counted; how many.

    An adaptive run (`run.stops`) logs no record past its task's stop (an episode that
    finished before the stop was known: not counted, not logged) and tells the progress
    line how many episodes are still wanted. A shard also reads the other shards' logs,
    so that it stops a task when the shards together have decided it.
    """
    stops = run.stops
    already = sum(1 for u in run.units if u.key in run.done_before and (stops is None or stops.wanted(u)))
    progress = Progress(total=_wanted(run), already=already, stream=progress_stream,
                        counts=None if stops is None else stops.wanted)
    records: Iterator[EpisodeRecord] = executor.execute(run)
    peers = _Peers(run) if stops is not None and not executor.logs_itself else None
    counter = _Counter(run, progress)
    try:
        _feed(records, executor.sink(run), counter, peers)
    except KeyboardInterrupt:
        executor.stop()
        _close(records)
        progress.close()
        raise _interrupted(run, counter.ran, executor) from None
    except OSError:  # a full disk: stop the workers now; run_eval says what to do
        try:
            _close(records)
        except Exception as err:  # the disk's error is the one to report
            log.warning("stopping the run after a failed write: %s: %s", type(err).__name__, err)
        progress.close()
        raise
    progress.close()
    return counter.ran


def _feed(records: Iterator[EpisodeRecord], sink: RecordSink, counter: _Counter, peers: _Peers | None) -> None:
    """The one record loop: each record still wanted into the sink, each one it has made
    ready counted, the rest once the executor is done."""
    stops = counter.run.stops
    try:
        for rec in records:
            if stops is not None:
                if peers is not None and peers.refresh():
                    counter.progress.set_total(_wanted(counter.run))
                if not stops.wanted(rec):
                    continue
            for ready in sink.put(rec):
                counter.count(ready, sink)
        for ready in sink.flush():
            counter.count(ready, sink)
    finally:
        sink.close()


class _Counter:
    """Counts a record once it is durable, unless it is past its task's stop."""

    def __init__(self, run: Run, progress: Progress) -> None:
        self.run, self.progress, self.ran = run, progress, 0

    def count(self, rec: EpisodeRecord, sink: RecordSink) -> None:
        stops = self.run.stops
        if stops is not None and not stops.wanted(rec):
            return  # past its task's stop: cancelled, neither logged nor counted
        sink.log(rec)  # durable: from here on it counts
        self.ran += 1
        if stops is not None and stops.observe(rec):
            self.progress.set_total(_wanted(self.run))
        self.progress.update(rec)


def _interrupted(run: Run, ran: int, executor: Executor) -> RunInterrupted:
    """Ctrl-C: what this run finished, what the directory holds, how to go on."""
    left = len(pending(run.units, read_merged(run.output_dir, run.plan).done_keys()))
    return RunInterrupted(
        f"interrupted: {ran} episodes finished in this run; {len(run.units) - left} of {len(run.units)} "
        f"are saved in {run.output_dir}; {executor.resume_hint()}"
    )


def _wanted(run: Run) -> int:
    """The share's units that count: all of them, less those past their task's stop."""
    return len(run.units) if run.stops is None else sum(map(run.stops.wanted, run.units))


class _Peers:
    """What an adaptive run learns from outside this process, read at most every 0.1 s (a few
    stat and read calls): the other shards' records, and the other run of a comparison."""

    def __init__(self, run: Run) -> None:
        assert run.stops is not None
        self.stops = run.stops
        self.tail = LogTail(run.output_dir) if run.cfg.eval.num_shards > 1 else None
        if self.tail is not None:
            self.tail.skip_existing()  # open_run read them
        self.last = time.monotonic()

    def refresh(self) -> bool:
        now = time.monotonic()
        if now - self.last < 0.1:
            return False
        self.last = now
        changed = False
        for rec in self.tail.new_records() if self.tail is not None else ():
            changed |= self.stops.observe(rec)
        return self.stops.refresh() or changed


def _close(records: Iterator[EpisodeRecord]) -> None:
    close = getattr(records, "close", None)
    if close is not None:
        close()  # the scheduler's cleanup (workers, videos) runs now, not at garbage collection
