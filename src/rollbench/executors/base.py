"""What every way of running units implements; the run's life around it is `lifecycle`'s.

    lifecycle.run_eval:  check + plan ─▶ executor.setup ─▶ open the run ─▶ executor.start
                         ─▶ executor.execute (records) ─▶ close the run ─▶ executor.finish

An executor only decides where and how units run and hands back their records; it never
opens or closes a run, never writes `eval_info.json`, and never prints.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rollbench.config.fields import build
from rollbench.config.run import RunConfig
from rollbench.errors import ConfigError
from rollbench.plan import EpisodeUnit, UnitKey, shard
from rollbench.results.dataset import part_writer
from rollbench.results.eval_info import ExecutionFacts
from rollbench.results.log import writer_name
from rollbench.results.merge import Merged
from rollbench.results.owners import Claim
from rollbench.results.records import EpisodeRecord
from rollbench.results.sink import DurableLog, RecordSink
from rollbench.stopping.adaptive import Stops


@dataclass(frozen=True)
class Run:
    """An opened run (`lifecycle.open_run`): what it is, where it writes, and what is left to do;
    what the lifecycle hands every executor."""

    cfg: RunConfig
    output_dir: Path
    plan: list[EpisodeUnit]  # the whole run, every shard
    units: list[EpisodeUnit]  # this run's share of it
    done_before: frozenset[UnitKey]  # finished in the logs when the run opened
    todo: list[EpisodeUnit]  # units of the share still to run
    continuing: bool  # the directory held this run already
    opened_at: float  # unix time
    stops: Stops | None = None  # --eval.ci_width: what each task's stop rule has decided so far
    claim: Claim | None = None  # this process owns the directory until the run ends (`results.owners`)


@dataclass(frozen=True)
class Writes:
    """What of a run this process writes, for its claim on the directory (`results.owners`)."""

    shard_id: int | None  # None: every shard (one process, or the shards executor's launcher)
    launched_by: int | None = None  # the pid of the shard launcher whose child this process is


class Executor(abc.ABC):
    """Runs a run's units. A subclass registered in `rollbench.executors.EXECUTORS` is what
    `--executor=NAME` builds (`for_run`); the lifecycle calls the hooks below in order."""

    #: False: every record `execute` yields is appended to this process's durable log before it
    #: counts (`sink`). True: the executor's own processes write their logs (local shards), its
    #: sink only counts, and the close joins their dataset parts.
    logs_itself: ClassVar[bool] = False
    #: False: the run is not this process's to close (a child of `--executor=shards`): after
    #: its drive the lifecycle calls `hand_over` instead of closing; its launcher closes once
    closes: ClassVar[bool] = True
    #: a dataclass of the executor's own flags (`--executor.<field>=VALUE`), or None: it takes none
    options_class: ClassVar[type | None] = None

    @classmethod
    def options(cls, cfg: RunConfig) -> Any:
        """`cfg`'s --executor.* flags as `options_class` (None when it has none); a flag it does
        not take is a one-line ConfigError."""
        if cls.options_class is None:
            if cfg.executor_options:
                first = next(iter(cfg.executor_options))
                raise ConfigError(f"--executor.{first}: --executor={cfg.executor} takes no --executor.* flags")
            return None
        return build(cls.options_class, cfg.executor_options, "executor.")

    @classmethod
    def for_run(cls, cfg: RunConfig, flags: Mapping[str, str]) -> Executor:
        """The executor of a run with config `cfg`, given on the command line as `flags`
        (default: `cls()`; every hook gets the config later)."""
        return cls()

    def share(self, cfg: RunConfig, plan: list[EpisodeUnit]) -> list[EpisodeUnit]:
        """The units of the plan this run is responsible for (default: its shard)."""
        return shard(plan, cfg.eval.shard_id, cfg.eval.num_shards)

    def writes(self, cfg: RunConfig) -> Writes:
        """What of the run this process writes (default: its shard, or every shard of an unsharded
        run); whose child it is, for a shard launcher's child."""
        return Writes(None if cfg.eval.num_shards == 1 else cfg.eval.shard_id)

    def setup(self, cfg: RunConfig) -> None:  # noqa: B027 (optional hook)
        """Before the output directory is touched: build what a bad input breaks (the policy)."""

    def start(self, run: Run) -> None:  # noqa: B027 (optional hook)
        """The directory is ready: decide how to run `run.todo` (measure, schedule)."""

    @abc.abstractmethod
    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        """Run `run.todo`; yield each unit's record once, as it ends (done or failed)."""

    def sink(self, run: Run) -> RecordSink:
        """Where the records `execute` yields become durable before they count (results/sink.py):
        by default this process's episode log, after a recording's dataset part."""
        cfg = run.cfg
        writer = writer_name(cfg.eval.shard_id, cfg.eval.num_shards)
        return DurableLog(run.output_dir, writer, part_writer(cfg, run.output_dir))

    @abc.abstractmethod
    def facts(self) -> ExecutionFacts:
        """What it decided and did, for eval_info.json."""

    def describe(self) -> str:
        """How the units ran, for the closing line: "(continuous mode)", "in 3 shard processes"."""
        facts = self.facts()
        return f"({facts.mode or facts.executor})"

    def stop(self) -> None:  # noqa: B027 (optional hook)
        """Interrupted (Ctrl-C): stop whatever still runs, keeping what finished."""

    def resume_hint(self) -> str:
        return "run the same command again to resume"

    def finish(self, run: Run, merged: Merged) -> list[str]:
        """After the run is closed: problems the user must hear of, one message each."""
        return []

    def hand_over(self, run: Run, ran: int) -> None:
        """An executor that does not close (`closes = False`): leave what it decided and counted
        for the process that closes the run."""
        raise NotImplementedError(f"{type(self).__name__} closes its runs; hand_over is for those that do not")

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Free what `setup` and `start` built; called once, whatever happened."""
