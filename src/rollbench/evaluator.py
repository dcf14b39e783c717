"""Evaluate a policy object in memory, from Python: `rollbench.Evaluator` (docs/python_api.md).

    with rollbench.Evaluator("pusht", "runs/train-eval", workers=4) as ev:   # flags as `rollbench eval` takes them
        result = ev.evaluate(policy, n_episodes=50, name="step-2000")   # one run: runs/train-eval/step-2000
        result.success_rate, result.per_task, result.episodes

Each call is one run of `lifecycle.run_eval` (check, open, drive, close), exactly as `rollbench
eval` runs one, with the local executor handed the caller's object (`LocalExecutor(policy=...)`)
instead of building one from `--policy.type`: the env workers step the envs, the policy is
called in this process (`--policy.placement=driver`). So the durable log, resume,
eval_info.json and the per-episode results are the CLI's; the result is read from what the
close made. The run's config names the object `--policy.type=object --policy.path=NAME`.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rollbench import lifecycle
from rollbench.config.codec import config_from_flags, to_flags
from rollbench.config.run import RunConfig
from rollbench.errors import ConfigError, RollbenchError
from rollbench.executors.local import LocalExecutor
from rollbench.policies.base import Policy
from rollbench.policies.module import wrap
from rollbench.results.records import EpisodeRecord

#: flags the Evaluator sets itself, with what to give instead
OWN_FLAGS = {
    "env.type": "give Evaluator(env=...)",
    "policy.type": "the policy is the object handed to evaluate()",
    "policy.path": "evaluate(name=...) names the policy and its run",
    "output_dir": "give Evaluator(output_dir=...); each evaluate() writes a subdirectory of it",
    "job_name": "evaluate(name=...) names the run",
}
#: the one value each of these flags may have: a policy object cannot leave this process, so
#: this process runs every episode (the local executor, one shard)
ONE_PROCESS = {"executor": "local", "eval.num_shards": "1", "eval.shard_id": "0", "launch": "none", "policy.placement": "driver"}
#: the Evaluator's defaults where they differ from `rollbench eval`'s: its policy stays in this
#: process; report.html is drawn only when asked for (about a CPU second per run, in a training loop)
DEFAULTS = {"policy.placement": "driver", "eval.report": "false"}


@dataclass(frozen=True)
class Rate:
    """A success rate as eval_info.json reports it: percent, with its 95% interval (Wilson,
    percent); `rate` and `ci95` are the same as fractions. None where no episode counted."""

    pc_success: float | None
    pc_success_ci95: tuple[float, float] | None
    n_success: int
    n_episodes: int

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> Rate:
        """From a `per_task` entry, a `per_group` one, or `overall` of eval_info.json."""
        ci = section.get("pc_success_ci95")
        return cls(section.get("pc_success"), None if ci is None else (ci[0], ci[1]), int(section.get("n_success") or 0),
                   int(section.get("n_episodes") or 0))

    @property
    def rate(self) -> float | None:
        return None if self.pc_success is None else self.pc_success / 100.0

    @property
    def ci95(self) -> tuple[float, float] | None:
        return None if self.pc_success_ci95 is None else (self.pc_success_ci95[0] / 100.0, self.pc_success_ci95[1] / 100.0)


@dataclass(frozen=True)
class EvalResult:
    """One `evaluate` call's run: what its close wrote (`info`, eval_info.json as a dict) and
    the records that count, in plan order (`episodes`)."""

    name: str
    output_dir: Path  # the run's directory: episodes/ (the durable log), eval_info.json, run.json
    info: dict[str, Any]
    episodes: list[EpisodeRecord]
    ran: int  # episodes run by this call (fewer than planned where it resumed a run)
    failed: int  # episodes that failed for infrastructure reasons (not counted in the rates)
    problems: list[str]

    @property
    def success_rate(self) -> Rate:
        """Over every episode that counts (eval_info.json's `overall`)."""
        return Rate.of(self.info["overall"])

    @property
    def per_task(self) -> dict[str, Rate]:
        """Task -> its rate (`per_task`); "group/task" keys where a task is in several groups."""
        tasks = self.info["per_task"]
        names = [t["task"] for t in tasks]
        plain = len(set(names)) == len(names)
        return {t["task"] if plain else f"{t['task_group']}/{t['task']}": Rate.of(t) for t in tasks}

    @property
    def status(self) -> str:
        return str(self.info["status"])

    @property
    def ok(self) -> bool:
        return self.status == "complete" and not self.failed and not self.problems


class _Nowhere(io.StringIO):
    """The progress line's stream when the caller wants none (keeps nothing)."""

    def write(self, text: str) -> int:
        return len(text)


class Evaluator:
    """Evaluates policy objects in memory on one benchmark, each `evaluate` call one run in a
    subdirectory of `output_dir`, with the results `rollbench eval` gives on the same seeds.

    `env` is `--env.type`; `task` `--env.task`; `workers` `--workers`; any other flag of
    `rollbench eval` goes in `flags` ({"env.episode_length": 50, "eval.batch_size": 4}) or as
    a keyword with `__` for the dot (`eval__batch_size=4`). Bad flags are the CLI's one-line
    `ConfigError`, raised here, before anything runs. `progress`: the progress line's stream
    (default stderr, as the CLI's; False: none).

    Not yet: each call starts its env workers and stops them at its end (a few seconds for a
    simulator that loads slowly); keeping them warm between calls is the next step.
    """

    def __init__(
        self, env: str, output_dir: str | Path, *, task: str | None = None, workers: int | str | None = None,
        flags: Mapping[str, Any] | None = None, progress: TextIO | bool = True, **options: Any,
    ) -> None:
        named = {**(flags or {}), **{k.replace("__", "."): v for k, v in options.items()},
                 **{k: v for k, v in (("env.task", task), ("workers", workers)) if v is not None}}
        given = to_flags(named)  # as a run's config becomes flags (True -> "true", (1, 2) -> "1,2"); None: the default
        _refuse_own(given)
        self.output_dir = Path(output_dir)
        self.flags = {**DEFAULTS, **given, "env.type": env}
        self.progress: TextIO | None = None if progress is True else _Nowhere() if progress is False else progress
        self._counter = itertools.count(1)
        self._closed = False
        self.config("check")  # every flag read as the CLI reads it, before any run

    def config(self, name: str, n_episodes: int | None = None, seed: int | None = None) -> RunConfig:
        """The config of the run `name` (`n_episodes` per task, episode i with seed `seed` + i;
        None: the Evaluator's flags, else the CLI's defaults)."""
        flags = {**self.flags, "policy.type": "object", "policy.path": name, "job_name": name,
                 "output_dir": str(self.output_dir / name)}
        if n_episodes is not None:
            flags["eval.n_episodes"] = str(n_episodes)
        if seed is not None:
            flags["seed"] = str(seed)
        cfg = config_from_flags(flags)
        LocalExecutor.options(cfg)  # it takes no --executor.* flags: the CLI's line for any
        return dataclasses.replace(cfg, env=cfg.env.resolve())  # an EnvHub repository: its commit, once

    def evaluate(self, policy: Any, n_episodes: int | None = None, seed: int | None = None,
                 name: str | None = None) -> EvalResult:
        """Run `policy` (a rollbench `Policy`, or an object with `act(batch, slots)` as
        `--policy.type=module` takes one) on `n_episodes` per task from `seed`, as the run
        `name` (default eval-0001, eval-0002, ...: the next free one). A `name` whose run is in
        `output_dir` already resumes it (a finished one is read back), as the CLI does."""
        if self._closed:
            raise RollbenchError("this Evaluator is closed; make a new one")
        name = self._name(name)
        cfg = self.config(name, n_episodes, seed)
        handed = policy if isinstance(policy, Policy) else wrap(policy, name, "Evaluator.evaluate(policy=...): got")
        view = _draw_report if cfg.eval.report else None
        outcome = lifecycle.run_eval(cfg, LocalExecutor(policy=handed), progress_stream=self.progress, view=view)
        assert outcome.info is not None and outcome.counted is not None  # the local executor closes its runs
        counted = outcome.counted
        episodes = [counted.records[u.key] for u in counted.plan if u.key in counted.records]
        return EvalResult(name, outcome.output_dir, outcome.info.to_json(), episodes, outcome.ran, outcome.failed,
                          outcome.problems)

    def _name(self, name: str | None) -> str:
        if name is None:
            return next(n for n in (f"eval-{k:04d}" for k in self._counter) if not (self.output_dir / n).exists())
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise ConfigError(f"evaluate(name={name!r}) is not allowed: it names the run's subdirectory of "
                              f"{str(self.output_dir)!r}; give a name without '/' (e.g. 'step-2000')")
        return name

    def close(self) -> None:
        """Nothing stays running between calls yet (each call's workers end with it)."""
        self._closed = True

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refuse_own(flags: Mapping[str, str]) -> None:
    for key, value in flags.items():
        if key in OWN_FLAGS:
            raise ConfigError(f"--{key}={value} is not an Evaluator flag: {OWN_FLAGS[key]}")
        if key in ONE_PROCESS and value != ONE_PROCESS[key]:
            raise ConfigError(f"--{key}={value} is not allowed with rollbench.Evaluator: its policy object stays in this "
                              f"process, which runs every episode and calls the policy itself (--{key}={ONE_PROCESS[key]})")


def _draw_report(output_dir: Path) -> Path | None:
    # lazy: matplotlib, only when eval.report=true asks for the page
    from rollbench.report.report import draw_report

    return draw_report(output_dir)
