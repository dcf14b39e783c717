"""One life for every run, whoever runs its units: check, open, drive, close.

    check  the benchmark, where the run writes, the other run of a comparison; the plan
                                                                        (checks.py)
    open   claim the output directory (one run owns it), prepare or resume it, the stop
           rule, the units still to do                                  (opening.py)
    drive  hand them to an executor; log each record it yields durably before it counts
           (an adaptive run drops a record past its task's stop); progress  (drive.py)
    close  merge every log of the directory once into the whole EvalInfo (the stop rule's
           estimates, a sweep's per-condition results, a recording's dataset) and write it
           atomically                                                   (close.py)

`rollbench eval` runs this with whichever executor `--executor` names (`executors.local`;
`executors.shards`, the shard launcher; `executors.ray`; a plugin); `rollbench
merge` is a close with nothing executed (`close.merge_dir`). Nothing here prints, and the
page (report.html) is the CLI's to draw: the CLI says what happened from the returned values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rollbench.checks import checked_plan
from rollbench.close import Closing, close_run, push_dataset
from rollbench.config.run import RunConfig
from rollbench.drive import drive
from rollbench.errors import DiskFull, RollbenchError, is_disk_full
from rollbench.executors.base import Executor, Run
from rollbench.opening import open_run
from rollbench.plan import EpisodeUnit
from rollbench.results.eval_info import EvalInfo
from rollbench.results.merge import Merged, read_merged


@dataclass(frozen=True)
class RunOutcome:
    output_dir: Path
    info: EvalInfo | None  # None: a shard child of --executor=shards, whose launcher closes the run
    ran: int  # episodes run by this command
    failed: int  # units of this run's share logged as failed (other shards' failures are theirs)
    how: str  # e.g. "(continuous mode)", "in 3 shard processes"
    problems: list[str]  # what the executor says went wrong (failed shards, what to rerun)
    report: Path | None = None  # the page `view` drew (report.html), if any
    counted: Merged | None = None  # the records that count, as the close merged them (None: not closed here)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.problems


#: draws a closed run's page from its directory (the CLI's report.html), or None if it cannot
View = Callable[[Path], "Path | None"]


def run_eval(
    cfg: RunConfig, executor: Executor, progress_stream: Any = None, command: list[str] | None = None,
    view: View | None = None,
) -> RunOutcome:
    """Check, open the run, execute what is left of it, close it; `view` draws its page. The
    run owns its directory from the open to the end of its page (`results.owners`)."""
    plan = checked_plan(cfg)
    opened: list[Run] = []
    try:
        outcome = _run(cfg, executor, plan, opened, progress_stream, command)
        if outcome.info is not None and view is not None:
            outcome = replace(outcome, report=view(outcome.output_dir))
        return outcome
    finally:
        for run in opened:
            if run.claim is not None:
                run.claim.release()  # another run may take the directory now


def _run(cfg: RunConfig, executor: Executor, plan: list[EpisodeUnit], opened: list[Run], progress_stream: Any,
         command: list[str] | None) -> RunOutcome:
    try:
        executor.setup(cfg)  # a bad policy fails here, before any output is written
        run = open_run(cfg, plan, executor.share(cfg, plan), executor.writes(cfg))
        opened.append(run)
        executor.start(run)
        ran = drive(run, executor, progress_stream)
        if not executor.closes:  # a shard child: its launcher closes the run once, with every child's facts
            executor.hand_over(run, ran)
            return _handed_over(run, executor, plan, ran)
        closing = Closing(executor.facts(), command, run.opened_at, None if run.stops is None else run.stops.rule,
                          run.continuing, join_dataset=executor.logs_itself or cfg.eval.num_shards == 1)
        merged, info = close_run(run.output_dir, cfg, plan, closing)
        if not executor.logs_itself:
            counted = {u.key for u in merged.plan}
            lost = [u for u in run.todo if u.key in counted and u.key not in merged.records]
            if lost:
                raise RollbenchError(f"internal: {len(lost)} units of this run are missing from its log, e.g. {lost[0].label()}")
        problems = executor.finish(run, merged) + push_dataset(cfg, info)
    except OSError as err:
        if not is_disk_full(err):
            raise
        raise _disk_full(err, cfg, plan, executor) from err
    finally:
        executor.close()
    return RunOutcome(run.output_dir, info, ran, _failed(run, merged), executor.describe(), problems, counted=merged)


def _handed_over(run: Run, executor: Executor, plan: list[EpisodeUnit], ran: int) -> RunOutcome:
    """A run another process closes (an `--executor=shards` child): no eval_info.json, report or
    dataset of its own; how many of its share failed."""
    return RunOutcome(run.output_dir, None, ran, _failed(run, read_merged(run.output_dir, plan)), executor.describe(), [])


def _failed(run: Run, merged: Merged) -> int:
    """Units of this run's share logged as failed, of those that count (`merged`: an adaptive
    run's, each task's prefix)."""
    return sum(1 for u in run.units if u.key in merged.records and not merged.records[u.key].ok)


def _disk_full(err: OSError, cfg: RunConfig, plan: list[EpisodeUnit], executor: Executor) -> DiskFull:
    """One line: which directory, that its disk is full, what is saved, how to go on."""
    out = Path(cfg.output_dir)
    try:
        saved = f"{len(read_merged(out, plan).done_keys())} of {len(plan)} episodes are saved"
    except OSError:
        saved = "the episodes logged so far are saved"
    where = f", writing {err.filename}" if err.filename else ""
    return DiskFull(
        f"the disk of --output_dir={str(out)!r} is full ({err.strerror}{where}); {saved} in its episode log; "
        f"free some space, then {executor.resume_hint()}"
    )
