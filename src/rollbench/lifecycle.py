"""One life for every run, whoever runs its units.

    open   check the benchmark and tasks, plan, claim the output directory (one run owns
           it: results/owners.py), take this run's share, prepare or resume it, find the
           units still to do                                           (open_run)
    run    hand them to an executor; append each record it yields to the durable log
           before it counts (an adaptive run first drops a record past its task's stop and
           feeds the stop rule); progress                              (run_eval)
    close  merge every log of the directory, build one EvalInfo (the stop rule's estimates
           in it), add a sweep's per-condition results and a recording's dataset, write it
           atomically                                                  (close_run)

`rollbench eval` runs this with whichever executor `--executor` names (`executors.local`,
or its shard launcher under `--launch=local`; `executors.ray`; a plugin); `rollbench
merge` is a run with nothing left to execute: it only closes. Nothing here prints: the CLI
does, from the returned values.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rollbench import perturb, writable
from rollbench.config.run import RunConfig
from rollbench.errors import ConfigError, DiskFull, RollbenchError, RunInterrupted
from rollbench.executors.base import Executor, Run
from rollbench.executors.shards import CHILD_ENV, launched_child, write_shard_facts
from rollbench.plan import EpisodeUnit, UnitKey, pending, plan_for
from rollbench.progress import Progress
from rollbench.rendering import check_user_backend
from rollbench.report import sweep
from rollbench.report import write_report as draw_report
from rollbench.report.paired_stop import paired_rule
from rollbench.report.versus import precheck, versus_rule
from rollbench.results import eval_info, owners, video
from rollbench.results.adaptive import Rule, StopRule, Stops
from rollbench.results.adaptive import apply as apply_stops
from rollbench.results.dataset import (
    EPISODES,
    PARTS_DIR,
    PartWriter,
    dataset_repo_id,
    dataset_root,
    joined,
    keeps,
    merge_parts,
    part_path,
    remove_joined_parts,
    sweep_parts,
)
from rollbench.results.dataset import push as push_dataset
from rollbench.results.eval_info import EvalInfo, ExecutionFacts
from rollbench.results.log import DISK_FULL, EPISODES_DIR, EpisodeLog, LogTail, read_records, writer_name
from rollbench.results.merge import Merged, merge
from rollbench.results.records import EpisodeRecord
from rollbench.results.store import prepare, sweep_partial_videos
from rollbench.scheduler.common import PolicyCalls, StepContext

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutcome:
    output_dir: Path
    info: EvalInfo | None  # None: a shard child of --launch=local, whose launcher closes the run
    ran: int  # episodes run by this command
    failed: int  # units of this run's share logged as failed (other shards' failures are theirs)
    how: str  # e.g. "(continuous mode)", "in 3 shard processes"
    problems: list[str]  # what the executor says went wrong (failed shards, what to rerun)
    report: Path | None  # report.html, unless it could not be drawn

    @property
    def ok(self) -> bool:
        return not self.failed and not self.problems


def checked_plan(cfg: RunConfig) -> list[EpisodeUnit]:
    """The run's plan, once its benchmark is installed and its tasks exist (no side effects)."""
    check_benchmark(cfg)
    check_outputs(cfg)
    if cfg.eval.versus is not None:
        precheck(cfg)
    return plan_for(cfg)


def check_benchmark(cfg: RunConfig) -> None:
    """What the benchmark must have for this run, before anything runs in it (eval, and
    `rollbench tune`'s probe): installed, a MUJOCO_GL that renders, the tasks, the sweep's axes."""
    cfg.env.check_available()
    check_user_backend(cfg.env, cfg.eval.max_episodes_rendered)  # before validate_tasks: listing the tasks can import MuJoCo
    cfg.env.validate_tasks()
    if cfg.eval.perturb:  # an axis the benchmark has nothing for: refused before any episode
        ctx = StepContext(cfg.env, cfg.policy, paraphrases=cfg.eval.paraphrases)
        perturb.check_benchmark(perturb.parse(cfg.eval.perturb), cfg.env.features, cfg.env.type_name, ctx.action_space,
                                cfg.env.native_axes)
        for cid in (c for c in cfg.eval.conditions if perturb.condition(c).get("language.paraphrase")):
            for task in (t for names in cfg.env.tasks().values() for t in names):
                ctx.instruction(cid, task)  # a task without its paraphrase k: refused here


def check_outputs(cfg: RunConfig) -> None:
    """Where the run writes, before any work (a checkpoint's download, the policy's load, the
    first episode): --output_dir and the folders of an earlier run in it that this one writes
    into, and --eval.recording_root when it records."""
    writable.output_dir("--output_dir", cfg.output_dir)
    videos = Path(cfg.output_dir).expanduser() / "videos"
    filmed = [f"videos/{d.name}" for d in videos.iterdir() if d.is_dir()] if videos.is_dir() else []
    writable.run_folders("--output_dir", cfg.output_dir, [EPISODES_DIR, "logs", "videos", *filmed, PARTS_DIR,
                                                          *([] if cfg.eval.recording_root else ["dataset"])])
    _check_recording_root(cfg)


def _check_recording_root(cfg: RunConfig) -> None:
    """--eval.recording_root: the joined dataset replaces that directory at the end of the
    run, so it must be new, empty, or this run's own dataset, and its disk must take it."""
    given = cfg.eval.recording_root
    if cfg.eval.record_mode is None or not given:
        return
    flag, root = f"--eval.recording_root={given}", Path(given).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{flag} is a file; give a directory for the run's dataset (new or empty)")
    if root.is_dir() and any(root.iterdir()) and not _this_run_s_dataset(Path(cfg.output_dir), root):
        raise ConfigError(f"{flag} holds other files, and rollbench replaces that directory with the run's dataset at "
                          f"the end; give a new or empty directory (e.g. {root / 'dataset'})")
    out = Path(cfg.output_dir).expanduser().resolve()
    if root == out or root in out.parents or (root.parent == out and root.name in ("episodes", PARTS_DIR, "videos")):
        raise ConfigError(f"{flag} would replace {'the run directory' if root in (out, *out.parents) else 'a folder of the run'} "
                          f"{root} with the dataset; give a directory of its own (default: <output_dir>/dataset)")
    writable.output_dir("--eval.recording_root", given)  # the dataset's folders are made there at the end


def _this_run_s_dataset(output_dir: Path, root: Path) -> bool:
    """Whether `root` is the dataset an earlier close of this run wrote (its eval_info.json says so)."""
    info = eval_info.read(output_dir) or {}
    dataset = info.get("dataset")
    recorded = dataset.get("root") if isinstance(dataset, dict) else None
    return isinstance(recorded, str) and Path(recorded).expanduser().resolve() == root


def open_run(cfg: RunConfig, plan: list[EpisodeUnit], units: list[EpisodeUnit]) -> Run:
    """Prepare (or resume in) the output directory; the units of `units` still to do."""
    output_dir = Path(cfg.output_dir)
    continuing, claim = prepare(output_dir, cfg.to_dict(), _writer(cfg))
    try:
        return _opened(cfg, output_dir, plan, units, continuing, claim)
    except BaseException:
        claim.release()
        raise


def _writer(cfg: RunConfig) -> owners.Writer:
    """This process as the directory's writer: which run, which shard, whose child."""
    parent = os.environ.get(CHILD_ENV, "") if launched_child(cfg) else ""
    every = cfg.launch == "local" or cfg.eval.num_shards == 1
    return owners.Writer(
        host=owners.host(), pid=os.getpid(), identity=cfg.identity(), shard_id=None if every else cfg.eval.shard_id,
        num_shards=cfg.eval.num_shards, launched_by=int(parent) if parent.isdigit() else None, resume=cfg.resume,
        started=time.time())


def _opened(cfg: RunConfig, output_dir: Path, plan: list[EpisodeUnit], units: list[EpisodeUnit], continuing: bool,
            claim: owners.Claim) -> Run:
    merged = merge(read_records(output_dir), plan)
    finished = merged.done_keys()
    rule = stop_rule(cfg)
    # failed units run again, so only finished ones decide; every shard's log is read
    stops = None if rule is None else Stops(rule, (r for r in merged.records.values() if r.ok))

    def still_to_do(done: frozenset[UnitKey]) -> list[EpisodeUnit]:
        todo = pending(units, done)
        if stops is None:
            return todo
        # each task's units in the order its prefixes grow (--seeds: round robin over the seeds'
        # blocks), a sweep's conditions side by side, so a condition's pairs with the control
        # come as they go
        tasks = {key: i for i, key in enumerate(dict.fromkeys((u.task_group, u.task_id) for u in todo))}
        conditions = {c: i for i, c in enumerate(cfg.eval.conditions)}
        todo.sort(key=lambda u: (tasks[(u.task_group, u.task_id)], stops.rule.position(u.episode_index),
                                 conditions[u.condition]))
        return [u for u in todo if stops.wanted(u)]

    done = frozenset(finished)
    recording = cfg.eval.record_mode
    if recording is not None:
        sweep_parts(output_dir)  # half-written by a killed run; their episodes were not logged
        # an episode logged without its frames (a run resumed with --eval.recording added) runs
        # again; a finished run's episodes are in its dataset (their parts removed), which is
        # kept if nothing more runs, else joined anew: then they run again for their frames
        in_dataset = joined(output_dir)

        def recorded(key: UnitKey, dataset_counts: bool) -> bool:
            rec = merged.records[key]
            part = part_path(output_dir, rec)
            return (not keeps(recording, rec) or part.is_dir()
                    or (dataset_counts and part.name in in_dataset))

        done = frozenset(k for k in finished if recorded(k, True))
        if still_to_do(done) and in_dataset:
            done = frozenset(k for k in finished if recorded(k, False))
    todo = still_to_do(done)
    if continuing:
        log.info("resuming in %s: %d of %d episodes already done", output_dir, sum(u.key in done for u in units), len(units))
        sweep_partial_videos(output_dir)  # left by killed workers; their episodes run again
    return Run(cfg, output_dir, plan, units, done, todo, continuing, time.time(), stops, claim)


def close_run(
    output_dir: Path, cfg: RunConfig, plan: list[EpisodeUnit], how: ExecutionFacts,
    command: list[str] | None = None, started: float | None = None, recursive: bool = False,
    merge_dataset: bool = True, opened: Run | None = None,
) -> tuple[Merged, EvalInfo]:
    """Merge every log under `output_dir` into one EvalInfo and write it atomically; the
    merged records that count (an adaptive run: each task's prefix, plan included).
    `merge_dataset`: a recorded run's parts are joined into its dataset (not by a shard
    process: the launcher, or `rollbench merge`, joins every shard's). `opened`: the run
    `open_run` opened, whose stop rule (or none) is applied again: built once per run; a
    merge, which opened nothing, builds its own."""
    merged = merge(read_records(output_dir, recursive=recursive), plan)
    if merged.conflicts:
        log.warning("%d units have conflicting results in the logs; see eval_info.json 'conflicts'", len(merged.conflicts))
    gone = video.missing(output_dir, merged.records.values(), recursive)
    if gone:
        log.warning("%d videos named in the episode logs are not on disk (e.g. %s); eval_info.json lists only those "
                    "that are", len(gone), gone[0])
    if opened is not None and opened.continuing:  # the commands that ran this run before called the policy too
        earlier = (eval_info.read(output_dir) or {}).get("policy_calls")
        how = replace(how, policy_calls=PolicyCalls.total(earlier, how.policy_calls))
    took = time.time() - started if started is not None else None
    rule: Rule | None
    if opened is None:
        rule = stop_rule(cfg)
    elif opened.stops is not None:
        rule = opened.stops.rule
        rule.refresh()  # the other run of a comparison: all it logged until now
    else:
        rule = None
    stopped = None if rule is None else (rule, apply_stops(rule, merged))
    info = eval_info.build(merged, cfg, output_dir, how, command, took, stopped)
    counted = merged if stopped is None else stopped[1].merged
    if len(cfg.eval.conditions) > 1:  # a sweep: each condition against the control
        info.body["per_condition"] = sweep.per_condition(counted, cfg.eval.conditions,
                                                         cfg.eval.n_episodes * max(1, len(cfg.seeds)), stopped)
    if cfg.eval.record_mode is not None and merge_dataset:
        finished = info.complete and info.body.get("adaptive", {}).get("tasks_running", 0) == 0
        info.body["dataset"] = _merge_dataset(output_dir, cfg, counted, finished)
    eval_info.write(output_dir, info)
    return counted, info


def _push_dataset(cfg: RunConfig, info: EvalInfo) -> list[str]:
    """--eval.recording_repo_id: the joined dataset, pushed to the hub (lerobot-eval's meaning)."""
    d = info.body.get("dataset")
    if not d or not cfg.eval.recording_repo_id or not d["episodes"]:
        return []
    problem = push_dataset(Path(cfg.output_dir), Path(d["root"]), d["repo_id"], cfg.eval.recording_private)
    if problem is None:
        log.info("pushed the dataset to the hub as %s", d["repo_id"])
    return [problem] if problem else []


def _merge_dataset(output_dir: Path, cfg: RunConfig, counted: Merged, finished: bool) -> dict[str, Any]:
    """The recorded episodes that count, in plan order, as one LeRobot dataset; a finished
    run's parts are removed once joined (the dataset holds their frames)."""
    recording = cfg.eval.record_mode
    assert recording is not None
    kept = [counted.records[u.key] for u in counted.plan
            if u.key in counted.records and keeps(recording, counted.records[u.key])]
    root = dataset_root(output_dir, cfg.eval.recording_root)
    repo_id = dataset_repo_id(output_dir, cfg.eval.recording_repo_id)
    t0 = time.monotonic()
    n = merge_parts(output_dir, kept, root, repo_id, _instruction_of(cfg))
    log.info("dataset: %d episodes joined into %s in %.1f s", n, root, time.monotonic() - t0)
    if finished and n:
        freed = remove_joined_parts(output_dir, kept, root)
        log.debug("dataset: removed the %d joined parts (%.1f MB)", n, freed / 1e6)
    out: dict[str, Any] = {"root": str(root), "repo_id": repo_id, "episodes": n, "record": cfg.eval.record}
    if len(cfg.eval.conditions) > 1:  # a sweep's: which conditions, and where each episode's is said
        out.update(record_conditions=cfg.eval.record_conditions, episodes_file=f"meta/{EPISODES}")
    return out


def stop_rule(cfg: RunConfig) -> Rule | None:
    """An adaptive run's stop rule: --eval.ci_width's (a sweep: per task and condition), a
    comparison against --eval.versus, or a sweep's conditions against its control."""
    if cfg.eval.versus is not None:
        return versus_rule(cfg)
    if cfg.eval.perturb_stop == "paired":
        return paired_rule(cfg)
    return StopRule.from_config(cfg.eval, max(1, len(cfg.seeds)))


def write_report(output_dir: Path) -> Path | None:
    """report.html from what close_run wrote; a page that cannot be drawn costs no result."""
    try:
        return draw_report(output_dir)
    except Exception as err:  # the results are saved; the page is a view of them
        log.warning("could not write %s/report.html (%s: %s); rerun `rollbench report %s`",
                    output_dir, type(err).__name__, err, output_dir)
        return None


def run_eval(
    cfg: RunConfig, executor: Executor, progress_stream: Any = None, command: list[str] | None = None,
) -> RunOutcome:
    """Open the run, execute what is left of it, close it. The run owns its directory from
    the open to the end of its report (`results.owners`)."""
    plan = checked_plan(cfg)
    opened: list[Run] = []
    try:
        return _run(cfg, executor, plan, opened, progress_stream, command)
    finally:
        for run in opened:
            if run.claim is not None:
                run.claim.release()  # another run may take the directory now


def _run(cfg: RunConfig, executor: Executor, plan: list[EpisodeUnit], opened: list[Run], progress_stream: Any,
         command: list[str] | None) -> RunOutcome:
    child = launched_child(cfg)
    try:
        executor.setup(cfg)  # a bad policy fails here, before any output is written
        run = open_run(cfg, plan, executor.share(cfg, plan))
        opened.append(run)
        executor.start(run)
        ran = _drive(run, executor, progress_stream)
        if child:  # the launcher closes the run once, with every child's facts
            return _child_outcome(run, executor, plan, ran)
        merged, info = close_run(run.output_dir, cfg, plan, executor.facts(), command, run.opened_at,
                                 merge_dataset=executor.logs_itself or cfg.eval.num_shards == 1, opened=run)
        if not executor.logs_itself:
            counted = {u.key for u in merged.plan}
            lost = [u for u in run.todo if u.key in counted and u.key not in merged.records]
            if lost:
                raise RollbenchError(f"internal: {len(lost)} units of this run are missing from its log, e.g. {lost[0].label()}")
        problems = executor.finish(run, merged) + _push_dataset(cfg, info)
    except OSError as err:
        if err.errno not in DISK_FULL:
            raise
        raise _disk_full(err, cfg, plan, executor) from err
    finally:
        executor.close()
    failed = sum(1 for u in run.units if u.key in merged.records and not merged.records[u.key].ok)  # counted units
    page = write_report(run.output_dir) if cfg.eval.report else None
    return RunOutcome(run.output_dir, info, ran, failed, executor.describe(), problems, page)


def _child_outcome(run: Run, executor: Executor, plan: list[EpisodeUnit], ran: int) -> RunOutcome:
    """A `--launch=local` child's end: what it decided and counted goes to logs/shard-K.json
    for the launcher's eval_info.json; no eval_info.json, report or dataset of its own."""
    facts = executor.facts()
    write_shard_facts(run.output_dir, run.cfg.eval.shard_id, {
        "shard_id": run.cfg.eval.shard_id, "ran": ran, "mode": facts.mode, "scheduling": facts.scheduling,
        "policy_calls": facts.policy_calls, "startup": facts.startup, "tune": facts.tune,
    })
    records = merge(read_records(run.output_dir), plan).records
    failed = sum(1 for u in run.units if u.key in records and not records[u.key].ok)
    return RunOutcome(run.output_dir, None, ran, failed, executor.describe(), [], None)


def _disk_full(err: OSError, cfg: RunConfig, plan: list[EpisodeUnit], executor: Executor) -> DiskFull:
    """One line: which directory, that its disk is full, what is saved, how to go on."""
    out = Path(cfg.output_dir)
    try:
        saved = f"{len(merge(read_records(out), plan).done_keys())} of {len(plan)} episodes are saved"
    except OSError:
        saved = "the episodes logged so far are saved"
    where = f", writing {err.filename}" if err.filename else ""
    return DiskFull(
        f"the disk of --output_dir={str(out)!r} is full ({err.strerror}{where}); {saved} in its episode log; "
        f"free some space, then {executor.resume_hint()}"
    )


def _drive(run: Run, executor: Executor, progress_stream: Any) -> int:
    """Every record the executor yields: logged durably (unless it logs itself), then counted.

    An adaptive run (`run.stops`) logs no record past its task's stop (an episode that
    finished before the stop was known: not counted, not logged) and tells the progress
    line how many episodes are still wanted. A shard also reads the other shards' logs,
    so that it stops a task when the shards together have decided it.
    """
    stops = run.stops
    already = sum(1 for u in run.units if u.key in run.done_before and (stops is None or stops.wanted(u)))
    progress = Progress(total=_wanted(run), already=already, stream=progress_stream,
                        counts=None if stops is None else stops.wanted)
    ran = 0
    records: Iterator[EpisodeRecord] = executor.execute(run)
    writer = writer_name(run.cfg.eval.shard_id, run.cfg.eval.num_shards)
    peers = _Peers(run) if stops is not None and not executor.logs_itself else None
    try:
        if executor.logs_itself:
            for rec in records:
                if stops is not None and not stops.wanted(rec):
                    continue
                ran += 1
                if stops is not None and stops.observe(rec):
                    progress.set_total(_wanted(run))
                progress.update(rec)
        else:
            parts = _part_writer(run)
            with EpisodeLog(run.output_dir, writer) as episode_log:

                def count(rec: EpisodeRecord) -> None:
                    nonlocal ran
                    if stops is not None and not stops.wanted(rec):
                        return  # past its task's stop: cancelled, neither logged nor counted
                    episode_log.append(rec)  # fsync'ed: from here on it counts
                    ran += 1
                    if stops is not None and stops.observe(rec):
                        progress.set_total(_wanted(run))
                    progress.update(rec)

                try:
                    for rec in records:
                        if stops is not None:
                            if peers is not None and peers.refresh():
                                progress.set_total(_wanted(run))
                            if not stops.wanted(rec):
                                continue
                        if parts is not None and rec.frames is not None:
                            parts.submit(rec)  # logged once its frames are on disk
                        else:
                            count(rec)
                        for done in parts.ready() if parts is not None else ():
                            count(done)
                    for done in parts.ready(wait=True) if parts is not None else ():
                        count(done)
                finally:
                    if parts is not None:
                        parts.close()
    except KeyboardInterrupt:
        executor.stop()
        _close(records)
        progress.close()
        left = len(pending(run.units, merge(read_records(run.output_dir), run.plan).done_keys()))
        raise RunInterrupted(
            f"interrupted: {ran} episodes finished in this run; {len(run.units) - left} of {len(run.units)} "
            f"are saved in {run.output_dir}; {executor.resume_hint()}"
        ) from None
    except OSError:  # a full disk: stop the workers now; run_eval says what to do
        try:
            _close(records)
        except Exception as err:  # the disk's error is the one to report
            log.warning("stopping the run after a failed write: %s: %s", type(err).__name__, err)
        progress.close()
        raise
    progress.close()
    return ran


def _part_writer(run: Run) -> PartWriter | None:
    """--eval.recording: the thread that writes each kept episode's frames before it is logged."""
    cfg = run.cfg
    if cfg.eval.record_mode is None:
        return None
    repo_id = dataset_repo_id(run.output_dir, cfg.eval.recording_repo_id)
    return PartWriter(run.output_dir, type(cfg.env).fps, repo_id, _instruction_of(cfg), len(cfg.eval.conditions) > 1)


def _instruction_of(cfg: RunConfig) -> Callable[[EpisodeRecord], str]:
    """A recorded episode's `task`: the instruction its policy was given (under language.drop
    or language.paraphrase, the condition's)."""

    @functools.cache
    def given(task: str, cid: str) -> str:
        return perturb.given_instruction(cid, cfg.eval.paraphrases, task, cfg.env.task_description(task))

    return lambda rec: given(rec.task, rec.condition)


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


def merge_dir(root: Path, cfg: RunConfig, command: list[str] | None = None) -> EvalInfo:
    """`rollbench merge`: close a run (every log under `root`) that nothing executes now.
    `command`: the one that runs the merged run (its shards' flags, as one process)."""
    plan = plan_for(cfg)  # no availability check: a merge needs the logs, not the simulator
    if cfg.eval.record_mode is not None and cfg.eval.recording_root:  # the joined dataset goes there
        writable.output_dir("--eval.recording_root", cfg.eval.recording_root)
    n_dirs = len({*map(str, root.glob(f"**/{EPISODES_DIR}"))})
    _, info = close_run(root, cfg, plan, ExecutionFacts(mode="merge", merged_from=n_dirs), command, recursive=True)
    for problem in _push_dataset(cfg, info):
        log.warning("%s", problem)
    write_report(root)
    return info
