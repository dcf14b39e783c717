"""An executor plugin: every unit in this process, one env per task, one episode at a time.

Slow, and simple to follow with a debugger or a profiler: nothing runs in another process.
Select it with ROLLBENCH_PLUGINS=serial_executor and --executor=serial; its own flag:
--executor.fresh_env=true builds a new env for every episode.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rollbench.config.fields import opt
from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext, play_episode
from rollbench.errors import RollbenchError
from rollbench.executors import EXECUTORS
from rollbench.executors.base import Executor, Run
from rollbench.policies.base import Policy
from rollbench.results.eval_info import ExecutionFacts
from rollbench.results.records import EpisodeRecord


@dataclass(frozen=True)
class SerialOptions:
    """`--executor.*` flags of --executor=serial."""

    fresh_env: bool = opt(False, "a new env for every episode (default: one per task, kept for the run)")


@EXECUTORS.register("serial")
class SerialExecutor(Executor):
    options_class = SerialOptions
    policy: Policy | None = None

    def setup(self, cfg: RunConfig) -> None:
        # before the output directory is touched: a policy that cannot load stops the run here
        self.cfg = cfg
        self.opts: SerialOptions = self.options(cfg)
        self.ctx = StepContext.of_run(cfg)
        self.policy = self.ctx.make_policy()

    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        assert self.policy is not None
        self.policy.ready()
        envs: dict[str, Any] = {}
        try:
            for unit in run.todo:
                if run.stops is not None and not run.stops.wanted(unit):
                    continue  # --eval.ci_width: its task has stopped
                for attempt in range(self.cfg.eval.max_retries + 1):
                    try:
                        if unit.task not in envs:
                            envs[unit.task] = self.cfg.env.make_task_env(unit.task)
                        yield play_episode(self.ctx, self.policy, envs[unit.task], unit, record_mode=self.cfg.eval.record_mode)
                        if self.opts.fresh_env:
                            envs.pop(unit.task).close()
                        break
                    except RollbenchError:  # the policy's error (PolicyError): the run stops
                        raise
                    except Exception:  # the env failed: a fresh env, and the unit again
                        env = envs.pop(unit.task, None)
                        if env is not None:
                            env.close()
                        if attempt == self.cfg.eval.max_retries:
                            yield EpisodeRecord.failed(unit, traceback.format_exc(), "serial", attempt)
        finally:
            for env in envs.values():
                env.close()

    def facts(self) -> ExecutionFacts:
        return ExecutionFacts("serial", policy_calls=self.ctx.counts.to_json())

    def close(self) -> None:  # called whatever happened, even after a failed setup
        if self.policy is not None:
            self.policy.close()
