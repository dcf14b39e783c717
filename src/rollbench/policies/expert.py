"""The benchmark's scripted expert (e.g. MetaWorld's per-task policies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rollbench.policies.base import EpisodeStart, Policy, PolicyContext


class ExpertPolicy(Policy):
    """Per-row scripted actions; the expert of each slot's task is looked up at reset."""

    cheap = True

    def __init__(self, ctx: PolicyContext) -> None:
        self._benchmark = ctx.benchmark
        self._experts: dict[str, Callable[[dict[str, Any]], np.ndarray]] = {}
        self._slot_task: dict[int, str] = {}
        # fail when the policy is built (before any output is written), not at the first
        # reset; cheaply: in worker placement this probe never acts, and importing the
        # simulator here would only slow the start (~1 s for metaworld)
        self._benchmark.check_expert()

    def _expert(self, task: str) -> Callable[[dict[str, Any]], np.ndarray]:
        if task not in self._experts:
            self._experts[task] = self._benchmark.expert(task)
        return self._experts[task]

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        for slot, ep in zip(slots, episodes, strict=True):
            self._expert(ep.task)  # fail at reset, not mid-episode, if there is none
            self._slot_task[slot] = ep.task

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        keys = [k for k in batch if k != "task"]
        rows = []
        for i, slot in enumerate(slots):
            rows.append(self._expert(self._slot_task[slot])({k: batch[k][i] for k in keys}))
        return np.stack(rows)
