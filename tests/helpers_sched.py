"""Module policies for scheduler tests (`--policy.path=helpers_sched:NAME`)."""

from __future__ import annotations

from typing import Any

import numpy as np


class SharedState:
    """A policy that keeps one state for the whole batch, so it must run in lockstep."""

    per_slot_state = False

    def __init__(self, ctx: Any) -> None:
        self.t = 0

    def reset(self, slots: Any, episodes: Any) -> None:
        self.t = 0

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        self.t += 1
        return np.zeros((len(slots), 2), dtype=np.float32)


def shared_state_policy(ctx: Any) -> SharedState:
    return SharedState(ctx)


class CheapNaN:
    """Returns NaN actions; cheap, so it runs inside the workers."""

    cheap = True

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        return np.full((len(slots), 2), np.nan, dtype=np.float32)


def cheap_nan_policy() -> CheapNaN:
    return CheapNaN()
