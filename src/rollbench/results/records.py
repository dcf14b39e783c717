"""One finished episode, as it is written to the log (schema version 1)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rollbench.plan import EpisodeUnit, UnitKey

SCHEMA_VERSION = 1


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


@dataclass(frozen=True)
class EpisodeRecord:
    task_group: str
    task_id: int
    task: str
    episode_index: int
    seed: int
    success: bool
    sum_reward: float
    max_reward: float
    n_steps: int
    status: str = "ok"  # "ok" or "failed"
    error: str | None = None
    wall_s: float = 0.0
    worker: str = ""
    attempt: int = 0
    finished_at: float = 0.0  # unix time the episode ended
    video_path: str | None = None  # relative to the output dir
    writer: str = ""  # the log file (process) that wrote it; filled in on read
    condition: str = ""  # --eval.perturb: the unit's condition ("" for the control)
    #: --eval.recording: the episode's frames on their way to the dataset (never in the log)
    frames: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_unit(cls, unit: EpisodeUnit, **kwargs: Any) -> EpisodeRecord:
        return cls(
            task_group=unit.task_group,
            task_id=unit.task_id,
            task=unit.task,
            episode_index=unit.episode_index,
            seed=unit.seed,
            condition=unit.condition,
            **kwargs,
        )

    @classmethod
    def failed(cls, unit: EpisodeUnit, error: str, worker: str, attempt: int, wall_s: float = 0.0) -> EpisodeRecord:
        return cls.from_unit(
            unit, success=False, sum_reward=0.0, max_reward=0.0, n_steps=0,
            status="failed", error=error, worker=worker, attempt=attempt, wall_s=wall_s,
        )

    @property
    def key(self) -> UnitKey:
        return (self.task_group, self.task_id, self.episode_index)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def outcome(self) -> tuple[Any, ...]:
        """What must be equal between two runs of the same unit (not timings or workers)."""
        return (self.status, self.success, self.sum_reward, self.max_reward, self.n_steps, self.seed)

    def to_json(self) -> dict[str, Any]:
        data = asdict(replace(self, frames=None))
        data.pop("writer")
        data.pop("frames")
        if not self.condition:  # a run without --eval.perturb logs what it always did
            data.pop("condition")
        data["sum_reward"] = _finite(self.sum_reward)
        data["max_reward"] = _finite(self.max_reward)
        data["v"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        data = dict(data)
        data.pop("v", None)
        return cls(**data)
