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
    #: --seeds: the episode's index within its seed's block (what a lerobot-eval run with that
    #: seed calls it: LIBERO's initial state); -1: the same as `episode_index`
    index_in_seed: int = -1
    #: --eval.perturb: the condition's id (`perturb.Condition.id`; "" for the control)
    condition: str = ""

    @property
    def env_index(self) -> int:
        """The index the env and the policy see (`episode_index` of a one-seed run)."""
        return self.index_in_seed if self.index_in_seed >= 0 else self.episode_index

    @property
    def key(self) -> UnitKey:
        return (self.task_group, self.task_id, self.episode_index)

    def label(self) -> str:
        under = f" under {self.condition}" if self.condition else ""
        return f"{self.task_group}/{self.task} episode {self.episode_index} (seed {self.seed}){under}"


def make_plan(
    tasks: Mapping[str, Sequence[str]], n_episodes: int, seed: int, seeds: Sequence[int] = (),
    conditions: Sequence[str] = ("",),
) -> list[EpisodeUnit]:
    """Every unit of the run, task by task, in episode order.

    With several `seeds` (--seeds), each task runs `n_episodes` per seed: episode
    j * n_episodes + i has seed seeds[j] + i and is episode i of its seed's block, so the
    block of seed s is exactly the episodes a one-seed run with --seed=s would give.
    With several `conditions` (--eval.perturb; the control, "", first), each condition has
    such a block of every task: condition c's episode b * n_episodes + i (b the seed block)
    is episode c * blocks * n_episodes + b * n_episodes + i, with the control's seed and
    episode index (`index_in_seed`), so it is the control's episode, perturbed.
    """
    blocks = list(seeds) if len(seeds) > 1 else [seeds[0] if seeds else seed]
    per_condition = len(blocks) * n_episodes
    return [
        EpisodeUnit(group, task_id, c * per_condition + j * n_episodes + i, s + i, task,
                    i if len(blocks) > 1 or c else -1, cid)
        for group, names in tasks.items()
        for task_id, task in enumerate(names)
        for c, cid in enumerate(conditions)
        for j, s in enumerate(blocks)
        for i in range(n_episodes)
    ]


def plan_for(cfg: RunConfig) -> list[EpisodeUnit]:
    """The whole plan of the run `cfg` describes (every shard's units)."""
    return make_plan(cfg.env.tasks(), cfg.eval.n_episodes, cfg.seed, cfg.seeds, cfg.eval.conditions)


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
