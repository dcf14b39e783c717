"""`--eval.perturb_stop=paired`: a sweep's condition stops once its difference from the control is decided.

    records ──▶ Stops ──▶ PairedRule.decide((task, condition)): the condition's and the control's
                          same-seed episodes (same position), on the longest prefix both have
                          finished ──▶ sequential_test at alpha / (conditions x tasks)
                          ──▶ better / worse / equivalent at the first deciding look
                              (the last one included: the condition then ran every episode)
                     └──▶ PairedRule.decide((task, control)): once every condition of the task
                          has stopped, at the longest of their prefixes (their pairs need it)

Each (task, condition) is one test of the family, at alpha / (conditions x tasks) (Bonferroni):
each stops on its own evidence the moment it is decided, and every claim holds at once by the
union bound. The pooled-over-tasks test (stopping/sequential.py) would tie a condition's tasks
to one stop, and a task that is hurt would wait for the tasks that are not.

A decision is `report.versus.paired_decision` of two whole prefixes of per-episode results,
and the control's stop a function of its conditions' decisions, so every stop is a function
of the sweep's episodes alone: the same for any workers, executor, shards or resume point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollbench.stopping import sequential
from rollbench.stopping.adaptive import Outcomes, TaskKey, TaskStop, seed_major
from rollbench.stopping.versus import paired_decision


@dataclass(frozen=True)
class PairedRule:
    conditions: tuple[str, ...]  # the sweep's, the control ("") first
    n_tasks: int
    alpha: float  # over the whole family: every (task, condition)
    margin: float
    block: int
    max_episodes: int  # --eval.n_episodes times the number of --seeds
    seeds: int = 1
    design: sequential.Design = "anytime"

    paces = False

    @property
    def level(self) -> float:
        """Each (task, condition)'s test: alpha / (conditions x tasks)."""
        return self.alpha / (max(1, len(self.conditions) - 1) * self.n_tasks)

    def key(self, task_group: str, task_id: int, condition: str) -> TaskKey:
        return (task_group, task_id, condition)

    def position(self, episode_index: int) -> int:
        """Its index within its condition, round robin over --seeds' blocks (as StopRule's):
        a condition's and the control's episode at one position ran on the same seed."""
        return seed_major(episode_index % self.max_episodes, self.max_episodes, self.seeds)

    def linked(self, key: TaskKey) -> list[TaskKey]:
        group, task_id, condition = key[0], key[1], key[2] if len(key) > 2 else ""
        if condition:
            return [(group, task_id, "")]
        return [(group, task_id, c) for c in self.conditions[1:]]

    def decide(self, key: TaskKey, outcomes: Outcomes) -> TaskStop:
        group, task_id, condition = key[0], key[1], key[2] if len(key) > 2 else ""
        control = outcomes.get((group, task_id, ""), {})
        if condition:
            return paired_decision(control, outcomes.get(key, {}), self.max_episodes, self.max_episodes, self.block,
                                   self.level, self.margin, self.design, label="vs_control")
        theirs = [self.decide((group, task_id, c), outcomes) for c in self.conditions[1:]]
        looked = max((s.looked_at for s in theirs), default=0)
        if any(s.n_episodes is None for s in theirs):
            return TaskStop(None, "running", None, looked)
        n = max((s.n_episodes or 0 for s in theirs), default=self.max_episodes)
        # a condition decided at the last look ran every episode: its control did too
        return TaskStop(n, "conditions_stopped" if n < self.max_episodes else "max_episodes", None, looked)

    def refresh(self) -> list[TaskKey]:
        return []  # a function of this run's episodes alone

    def ready(self, key: TaskKey, position: int) -> bool:
        return True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"perturb_stop": "paired", "alpha": self.alpha, "level": self.level,
                               "margin": self.margin, "block": self.block, "max_episodes": self.max_episodes}
        if self.seeds > 1:
            out["seeds"] = self.seeds
        if self.design != "anytime":
            out["design"] = self.design
        return out


def paired_rule(cfg: Any) -> PairedRule:
    """The rule of `cfg` (a RunConfig with --eval.perturb and --eval.perturb_stop=paired)."""
    ev = cfg.eval
    seeds = max(1, len(cfg.seeds))
    n_tasks = sum(len(names) for names in cfg.env.tasks().values())
    return PairedRule(tuple(ev.conditions), n_tasks, ev.versus_alpha, ev.versus_margin, ev.ci_block,
                      ev.n_episodes * seeds, seeds, ev.versus_design)
