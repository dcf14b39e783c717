"""The in-process executor: this process drives a scheduler over its units.

    setup: build the policy once (a bad one fails before any output is written), or take the
           one its caller built (`LocalExecutor(policy=...)`: the Python API's object in memory,
           acted with in this process and left to its owner, never closed here)
    start: --workers=auto measures the machine; the render backend and the whole schedule
           are decided once (`scheduler.decide`; a shard child: with its launcher's `Override`)
    execute: lockstep (envs in this process) or continuous (a pool of worker processes),
           with the policy built in setup handed to the scheduler
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import Any

from rollbench import timeline, tune
from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext
from rollbench.errors import ConfigError
from rollbench.executors.base import Executor, Run
from rollbench.executors.shards import ShardChild, launched_by, read_override
from rollbench.policies.base import Policy
from rollbench.rendering import apply_backend
from rollbench.results.eval_info import ExecutionFacts
from rollbench.results.records import EpisodeRecord
from rollbench.results.video import check_encoder
from rollbench.results.video_cost import warn_if_costly
from rollbench.scheduler.continuous import run_continuous
from rollbench.scheduler.decide import Override, Schedule, decide
from rollbench.scheduler.lockstep import run_lockstep
from rollbench.tune.probe import rss_now


class LocalExecutor(Executor):
    @classmethod
    def for_run(cls, cfg: RunConfig, flags: Mapping[str, str]) -> Executor:
        """This process; in a child of the shards executor's launcher, this process as that
        launcher's shard (which does not close the run)."""
        launcher = launched_by()
        return cls() if launcher is None else ShardChild(cls(read_override(cfg)), launcher)

    def __init__(self, override: Override | None = None, policy: Policy | None = None) -> None:
        self.override = override  # a shard child's: what its launcher decided for it
        # built by the caller (`rollbench.Evaluator`), who keeps it: the run's config must place it in
        # this process (--policy.placement=driver), as no worker can build it
        self.given = policy
        self.cfg: RunConfig | None = None
        self.ctx: StepContext | None = None
        self.policy: Policy | None = None
        self.schedule: Schedule | None = None
        self.tuned: dict[str, Any] | None = None
        self.load_s = 0.0
        self.rss_before = 0

    def setup(self, cfg: RunConfig) -> None:
        if self.given is not None and cfg.policy.placement != "driver":
            raise ConfigError(f"--policy.placement={cfg.policy.placement}: a policy object handed in stays in this "
                              f"process, which only --policy.placement=driver keeps it in")
        self.cfg = cfg
        self.ctx = StepContext.of_run(cfg)
        self.rss_before, t0 = rss_now(), time.perf_counter()
        self.policy = self.ctx.make_policy() if self.given is None else self.ctx.as_run_policy(self.given)
        self.load_s = time.perf_counter() - t0
        if cfg.eval.max_episodes_rendered:
            check_encoder()

    def start(self, run: Run) -> None:
        assert self.cfg is not None and self.policy is not None
        cfg = self.cfg
        if cfg.workers == "auto" and self.override is None:  # after the directory is accepted: a refused one is said before a 30 s probe
            t0 = time.perf_counter()
            self.policy.ready()  # the probe needs it whole, and its load time
            self.load_s += time.perf_counter() - t0
            _, rec, use = tune.for_eval(cfg, self.policy, self.load_s, self.rss_before)
            self.tuned = tune.prediction(rec, use)
        else:
            rec = None
        self.schedule = decide(cfg, self.policy, len(run.todo), rec, self.override)
        apply_backend(self.schedule.gl_backend)  # this process renders in lockstep mode; workers get it in their spec
        warn_if_costly(cfg, run.todo, max(1, self.schedule.workers))  # say so before the run when videos cost much of it
        if self.schedule.placement == "worker":
            self.policy.close()  # every worker builds its own
            self.policy = None

    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        assert self.cfg is not None and self.ctx is not None and self.schedule is not None
        self.ctx.counts.calls = self.ctx.counts.rows = 0  # the run's calls only (not tune's probe)
        if self.schedule.mode == "lockstep":
            assert self.policy is not None
            return run_lockstep(self.ctx, self.policy, run.todo, self.schedule.lockstep_options(self.cfg), run.stops)
        return run_continuous(self.ctx, run.todo, self.schedule.pool_options(self.cfg), self.policy, run.stops)

    def facts(self) -> ExecutionFacts:
        assert self.schedule is not None
        assert self.ctx is not None
        return ExecutionFacts("local", scheduling=dataclasses.asdict(self.schedule), tune=self.tuned,
                              startup=timeline.startup(), policy_calls=self.ctx.counts.to_json())

    def describe(self) -> str:
        assert self.schedule is not None
        return f"({self.schedule.mode} mode)"

    def close(self) -> None:
        if self.policy is not None:
            hung = self.ctx is not None and self.ctx.hung  # a policy left inside a hung call is not closed:
            if not hung and self.given is None:  # its close could wait for that call, and the process ends now anyway
                self.policy.close()  # (a caller's own policy is the caller's to close)
            self.policy = None
