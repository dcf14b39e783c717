"""Adaptive evaluation: a task stops once its success rate is known to `--eval.ci_width`.

    records ──▶ Stops.observe ──▶ per task: the prefix 0..k-1 that counts, once decided
                     │                     (k: the first multiple of the block whose whole
                     │                      prefix has finished with a 95% Wilson interval
                     │                      at most ci_width wide; else n_episodes)
                     ├──▶ the lifecycle logs no record past its task's stop
                     ├──▶ schedulers drop, or cancel, the units past it (`wanted`)
                     └──▶ ... and start no unit the rule holds back yet (`ready`: a
                          comparison's run does not run far ahead of the other run)
    close: apply(merged) ──▶ only each task's prefix counts; why it stopped, what it saved

The decision is a function of the per-episode results of whole prefixes of episode
indices, never of the order in which episodes finished. Since every episode is a function
of its (task, index, seed), the stop, and so the result, is the same for any workers,
batch size, shard split, executor or resume point: only the work done past the stop (and
then thrown away) differs. A failed unit (a crashed worker, after its retries) counts as
finished for the prefix but gives no datum, as in the rates.

The rule is not part of a run's identity (it changes no episode): a finished run resumed
with a smaller `--eval.ci_width` runs only the episodes the tighter target needs.

What the numbers of a stopped task mean: the rule stops early on prefixes that look extreme,
so the prefix's k/n is biased and its fixed-n Wilson interval under-covers; stopping/estimates.py
gives the rule-aware unbiased rate and exact interval that eval_info reports.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rollbench.plan import EpisodeUnit
from rollbench.results.merge import Merged
from rollbench.results.records import EpisodeRecord
from rollbench.stats import wilson

if TYPE_CHECKING:
    from rollbench.config.eval import EvalConfig

#: what one stop decides: (task_group, task_id); in a sweep (--eval.perturb), (task_group, task_id,
#: condition): every condition of a task, the control ("") included, stops on its own prefix
TaskKey = tuple[str, int] | tuple[str, int, str]
# ci_width: the interval is narrow enough; better / worse / equivalent: a sequential comparison
# against another run decided (stopping/versus.py); max_episodes: neither, by the maximum
# conditions_stopped: a sweep's control under --eval.perturb_stop=paired, once every condition of its
# task has stopped (at the longest of their prefixes)
Reason = Literal["ci_width", "better", "worse", "equivalent", "conditions_stopped", "max_episodes", "running"]


@dataclass(frozen=True)
class TaskStop:
    """Where one task's rule stands: `n_episodes` counts once `reason` is not "running"."""

    n_episodes: int | None  # the prefix that counts (None while running)
    reason: Reason
    width: float | None  # the Wilson interval's width (fraction) at the last prefix looked at
    looked_at: int  # the longest finished prefix the rule has looked at (0: none yet)
    details: dict[str, Any] | None = None  # what else the rule says of it (a comparison's e-value, ...)


Outcomes = Mapping[TaskKey, Mapping[int, bool | None]]


class Rule(Protocol):
    """A stop rule: a pure function of a task's finished episodes (and, for a comparison,
    of the other run's or of the control's), looked at on whole prefixes of episode indices."""

    @property
    def max_episodes(self) -> int: ...

    def key(self, task_group: str, task_id: int, condition: str) -> TaskKey:
        """Which stop an episode belongs to (its task's; in a sweep, its task and condition's)."""
        ...

    def decide(self, key: TaskKey, outcomes: Outcomes) -> TaskStop:
        """`outcomes`: every key's finished episodes, by the rule's position of each (`position`);
        a key absent has none."""
        ...

    def linked(self, key: TaskKey) -> list[TaskKey]:
        """The keys whose decision may change when `key`'s episodes do (a sweep's paired stop:
        a task's control and its conditions); [] when each key stands alone."""
        ...

    def position(self, episode_index: int) -> int:
        """Where an episode stands in the order its key's prefixes follow."""
        ...

    def refresh(self) -> list[TaskKey]:
        """Read what the rule's outside sources (another run) added; the tasks to decide again."""
        ...

    @property
    def paces(self) -> bool:
        """Whether `ready` may ever say no (schedulers skip asking otherwise)."""
        ...

    def ready(self, key: TaskKey, position: int) -> bool:
        """Whether the episode at `position` of `key`'s prefix may start now: a comparison
        holds back what would run far ahead of the other run (stopping/versus.py). Safe to
        call from several threads; it changes no decision, only when units start."""
        ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class StopRule:
    ci_width: float  # a task stops once its 95% Wilson interval is at most this wide
    block: int  # ... checked after every `block` episodes of its prefix
    max_episodes: int  # --eval.n_episodes (times the number of --seeds)
    #: --seeds: the prefixes go round robin over the seeds' blocks (episode 0 of every seed, then
    #: episode 1, ...), so a task stopped early holds every seed's first episodes, not one seed's
    seeds: int = 1
    #: a sweep (--eval.perturb): each (task, condition) stops on its own prefix
    by_condition: bool = False

    @classmethod
    def from_config(cls, ev: EvalConfig, seeds: int = 1) -> StopRule | None:
        if ev.ci_width is None:
            return None
        return cls(ev.ci_width, ev.ci_block, ev.n_episodes * seeds, seeds, ev.is_sweep)

    def key(self, task_group: str, task_id: int, condition: str) -> TaskKey:
        return (task_group, task_id, condition) if self.by_condition else (task_group, task_id)

    def position(self, episode_index: int) -> int:
        """Episode j * n + i (index i of seed j's block of n) comes at i * seeds + j; in a sweep,
        of its index within its condition (plan.make_plan: the control's episode index)."""
        return seed_major(episode_index % self.max_episodes, self.max_episodes, self.seeds)

    def checkpoints(self) -> list[int]:
        """Prefix lengths at which the rule looks: every block, and the maximum."""
        return sorted({*range(self.block, self.max_episodes, self.block), self.max_episodes})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ci_width": self.ci_width, "block": self.block, "max_episodes": self.max_episodes}
        if self.seeds > 1:
            out["seeds"] = self.seeds
        return out

    def decide(self, key: TaskKey, outcomes: Outcomes) -> TaskStop:
        return decide(self, outcomes.get(key, {}))

    def linked(self, key: TaskKey) -> list[TaskKey]:
        return []

    def refresh(self) -> list[TaskKey]:
        return []  # a function of this run's episodes alone

    paces = False

    def ready(self, key: TaskKey, position: int) -> bool:
        return True


def seed_major(index: int, max_episodes: int, seeds: int) -> int:
    """Index j * n + i of `seeds` blocks of n (`max_episodes` in all) comes at i * seeds + j."""
    if seeds == 1:
        return index
    per_seed = max_episodes // seeds
    return (index % per_seed) * seeds + index // per_seed


def width(k: int, n: int) -> float | None:
    ci = wilson(k, n)
    return None if ci is None else ci[1] - ci[0]


def decide(rule: StopRule, outcomes: Mapping[int, bool | None]) -> TaskStop:
    """`outcomes`: episode index -> success (True/False), None for a failed unit; indices
    absent have not finished. The first checkpoint whose whole prefix has finished with an
    interval at most `ci_width` wide is the stop; the maximum stops it in any case."""
    last_w: float | None = None
    looked = 0
    k_succ = n_ok = 0
    for k in rule.checkpoints():
        for i in range(looked, k):
            if i not in outcomes:
                return TaskStop(None, "running", last_w, looked)
            out = outcomes[i]
            if out is not None:
                n_ok += 1
                k_succ += bool(out)
        looked = k
        last_w = width(k_succ, n_ok)
        if last_w is not None and last_w <= rule.ci_width:
            return TaskStop(k, "ci_width", last_w, k)
    return TaskStop(rule.max_episodes, "max_episodes", last_w, looked)


class Stops:
    """The live decisions of a run: fed every record that counts (or, for shards, that
    another process logged), asked by the lifecycle and the schedulers what is still wanted.

    `version` grows whenever a task's stop is decided, so a scheduler notices it with one
    integer comparison per loop.
    """

    def __init__(self, rule: Rule, records: Iterable[EpisodeRecord] = ()) -> None:
        self.rule = rule
        # the lifecycle observes; a lockstep task thread held back by pacing refreshes
        self._lock = threading.RLock()
        self.outcomes: dict[TaskKey, dict[int, bool | None]] = defaultdict(dict)
        self.cutoffs: dict[TaskKey, int] = {}
        self.version = 0
        for rec in records:
            self.observe(rec)

    def observe(self, rec: EpisodeRecord) -> bool:
        """Take one finished unit; True when it decided a stop (its key's, or a linked one's)."""
        key = self.rule.key(rec.task_group, rec.task_id, rec.condition)
        with self._lock:
            if key in self.cutoffs:
                return False
            seen = self.outcomes[key]
            at = self.rule.position(rec.episode_index)
            if at in seen and (seen[at] is not None or not rec.ok):
                return False  # a duplicate, or a failure of a unit that has finished
            seen[at] = rec.success if rec.ok else None
            return self.redecide(key)

    def redecide(self, key: TaskKey) -> bool:
        """Ask the rule again about `key` (its own episodes, or the other run's, changed) and
        about the keys linked to it, and theirs in turn when one of them is decided."""
        with self._lock:
            todo, changed = [key, *self.rule.linked(key)], False
            while todo:
                at = todo.pop()
                if at in self.cutoffs:
                    continue
                stop = self.rule.decide(at, self.outcomes)
                if stop.n_episodes is None:
                    continue
                self.cutoffs[at] = stop.n_episodes
                self.version += 1
                changed = True
                todo.extend(self.rule.linked(at))
            return changed

    def refresh(self) -> bool:
        """Read the rule's outside sources and decide again what they changed; True when a
        task's stop was decided."""
        with self._lock:
            changed = False
            for key in self.rule.refresh():
                changed |= self.redecide(key)
            return changed

    @property
    def paces(self) -> bool:
        return self.rule.paces

    def ready(self, unit: EpisodeUnit) -> bool:
        """Whether a wanted unit may start now (`Rule.ready`); a unit held back stays wanted."""
        return self.rule.ready(self.rule.key(unit.task_group, unit.task_id, unit.condition),
                               self.rule.position(unit.episode_index))

    def wanted(self, unit: EpisodeUnit | EpisodeRecord) -> bool:
        """Whether the unit still counts: its key has not stopped before its position."""
        cut = self.cutoffs.get(self.rule.key(unit.task_group, unit.task_id, unit.condition))
        return cut is None or self.rule.position(unit.episode_index) < cut

    def decided(self, key: TaskKey) -> bool:
        return key in self.cutoffs


@dataclass(frozen=True)
class Applied:
    merged: Merged  # only each key's counted prefix (plan and records)
    stops: dict[TaskKey, TaskStop]  # by the rule's key (`Rule.key`)
    past_stop: dict[TaskKey, int]  # episodes logged past the stop (finished before it was known): not counted


def outcomes_of(rule: Rule, records: Iterable[EpisodeRecord]) -> dict[TaskKey, dict[int, bool | None]]:
    """Each key's finished episodes by position: success, or None for a failed unit."""
    out: dict[TaskKey, dict[int, bool | None]] = defaultdict(dict)
    for rec in records:
        out[rule.key(rec.task_group, rec.task_id, rec.condition)][rule.position(rec.episode_index)] = (
            rec.success if rec.ok else None)
    return out


def apply(rule: Rule, merged: Merged) -> Applied:
    """What counts of a merged run under `rule`: each key's decided prefix (all of it while
    the key has not stopped: a partial run shows what it has)."""
    outcomes = outcomes_of(rule, merged.records.values())
    keys = list(dict.fromkeys(rule.key(u.task_group, u.task_id, u.condition) for u in merged.plan))
    stops = {key: rule.decide(key, outcomes) for key in keys}

    def counts(u: EpisodeUnit | EpisodeRecord) -> bool:
        cut = stops[rule.key(u.task_group, u.task_id, u.condition)].n_episodes
        return cut is None or rule.position(u.episode_index) < cut

    kept = Merged(
        plan=[u for u in merged.plan if counts(u)],
        records={k: r for k, r in merged.records.items() if counts(r)},
        duplicates=merged.duplicates,
        conflicts=[(a, b) for a, b in merged.conflicts if counts(a)],
        unplanned=merged.unplanned,
    )
    past: dict[TaskKey, int] = defaultdict(int)
    for rec in merged.records.values():
        if not counts(rec) and rec.ok:
            past[rule.key(rec.task_group, rec.task_id, rec.condition)] += 1
    return Applied(kept, stops, dict(past))


def stop_json(rule: Rule, stop: TaskStop, past_stop: int) -> dict[str, Any]:
    """A task's `stop` entry in eval_info.json."""
    return {
        "reason": stop.reason,
        "n_episodes": stop.n_episodes,
        "max_episodes": rule.max_episodes,
        "saved": None if stop.n_episodes is None else rule.max_episodes - stop.n_episodes,
        "ci_width": stop.width,
        "ran_past_stop": past_stop,
        **(stop.details or {}),
    }
