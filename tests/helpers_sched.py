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


class PerTaskCounter:
    """Lockstep-only policy with per-episode state rebound at reset (as LeRobot's are).

    Its actions depend on the step count since reset, so two tasks sharing one instance
    would corrupt each other's episodes; a shallow copy per task keeps them apart.
    """

    per_slot_state = False

    def __init__(self) -> None:
        self.weights = np.array([0.7, -0.4])  # shared by every copy
        self.state: dict[str, int] = {}

    def reset(self, slots: Any, episodes: Any) -> None:
        self.state = {"t": 0}  # rebound, not mutated: private to this copy

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        import time

        self.state["t"] += 1
        time.sleep(0.0005)  # let the task threads interleave
        pos = np.asarray(batch["observation.environment_state"])
        direction = pos[:, 2:4] - pos[:, 0:2]
        return np.clip(direction * self.weights * (1 + 0.1 * self.state["t"]), -1, 1).astype(np.float32)


def per_task_counter_policy() -> PerTaskCounter:
    return PerTaskCounter()


class ImageMean:
    """Per-row actions computed from the image and the state: exact equality tests pixels."""

    def __init__(self, ctx: Any) -> None:
        self.low, self.high = ctx.action_space.low, ctx.action_space.high

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        img = np.asarray(batch["observation.image"], dtype=np.float64)
        state = np.asarray(batch["observation.state"], dtype=np.float64)
        feats = img.mean(axis=(1, 2, 3))[:, None] / 255.0 + np.sin(state.sum(axis=1))[:, None]
        phase = np.arange(self.low.shape[0])[None, :]
        frac = 0.5 + 0.5 * np.sin(7.0 * feats + phase)
        return (self.low + (self.high - self.low) * frac).astype(np.float32)


def image_mean_policy(ctx: Any) -> ImageMean:
    return ImageMean(ctx)


class Keyed:
    """Checks the key-selection processor's batch, then acts from it (per row)."""

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        n = len(slots)
        assert set(batch) == {"observation.state", "observation.images.front", "task"}, sorted(batch)
        assert batch["observation.state"].shape == (n, 5)
        assert batch["observation.images.front"].shape == (n, 8, 8, 3)
        s = batch["observation.state"]
        img = batch["observation.images.front"].reshape(n, -1).mean(axis=1)
        return np.stack([np.tanh(s[:, 0] - s[:, 3] + img / 100.0), np.zeros(n)], axis=1).astype(np.float32)


def keyed_policy() -> Keyed:
    return Keyed()


class State6:
    cheap = True

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        s = batch["observation.state"]
        assert set(batch) == {"observation.state", "task"} and s.shape == (len(slots), 6)
        # environment_state (pos, target) first, then agent_pos (pos): move toward the target
        return np.clip((s[:, 2:4] - s[:, 4:6]) * 10, -1, 1).astype(np.float32)


def state6_policy() -> State6:
    return State6()
