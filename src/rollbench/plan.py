"""Work units, their seeds, and how a plan is split into shards.

Episode *i* of every task gets seed `seed + i` (LeRobot's convention), whatever the batch
size, worker count, shard or resume point: a unit's result depends on the unit alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollbench.config.run import RunConfig

UnitKey = tuple[str, int, int]


@dataclass(frozen=True, order=True)
class EpisodeUnit:
    """One episode to run: task `task_id` (index within `task_group`), episode `episode_index`."""

    task_group: str
    task_id: int
    episode_index: int
    seed: int
    task: str

    @property
    def key(self) -> UnitKey:
        return (self.task_group, self.task_id, self.episode_index)

    def label(self) -> str:
        return f"{self.task_group}/{self.task} episode {self.episode_index} (seed {self.seed})"


def make_plan(tasks: Mapping[str, Sequence[str]], n_episodes: int, seed: int) -> list[EpisodeUnit]:
    """Every unit of the run, task by task, in episode order."""
    return [
        EpisodeUnit(group, task_id, i, seed + i, task)
        for group, names in tasks.items()
        for task_id, task in enumerate(names)
        for i in range(n_episodes)
    ]


def plan_for(cfg: RunConfig) -> list[EpisodeUnit]:
    """The whole plan of the run `cfg` describes (every shard's units)."""
    return make_plan(cfg.env.tasks(), cfg.eval.n_episodes, cfg.seed)


def shard(units: Iterable[EpisodeUnit], shard_id: int, num_shards: int) -> list[EpisodeUnit]:
    """The units of shard `shard_id` of `num_shards`.

    Dealt round-robin over the plan in task order: every shard gets floor or ceil of
    n/num_shards episodes of every task (so no shard holds only the slow tasks), and the
    running offset carries over between tasks so shard sizes differ by at most one.
    """
    return [u for i, u in enumerate(units) if i % num_shards == shard_id]


def pending(units: Iterable[EpisodeUnit], done: Iterable[UnitKey]) -> list[EpisodeUnit]:
    finished = set(done)
    return [u for u in units if u.key not in finished]
