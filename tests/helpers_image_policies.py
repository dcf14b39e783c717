"""Policies for the image-benchmark tests (`--policy.type=module --policy.path=helpers_image_policies:NAME`).

Each asserts that every batch holds exactly the observation keys, shapes and dtypes the
benchmark promises, then returns random actions seeded by the episode (like `random`), so
lockstep and continuous runs can be compared episode by episode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class _Checking:
    """Checks the batch against `expected` {key: (shape of one row, dtype)}; random actions."""

    cheap = True  # runs inside the env workers

    def __init__(self, ctx: Any, expected: dict[str, tuple[tuple[int, ...], str]]) -> None:
        self.space = ctx.action_space
        self.expected = expected
        self.bench = ctx.benchmark
        self.rngs: dict[int, np.random.Generator] = {}
        self.prompts: dict[int, str] = {}  # slot -> the task string its episode's policy must get
        declared = {k: tuple(f.shape) for k, f in ctx.benchmark.features.items() if k != "action"}
        assert declared == {k: shape for k, (shape, _) in expected.items()}, f"features {declared} != {expected}"

    def reset(self, slots: Sequence[int], episodes: Sequence[Any]) -> None:
        for slot, ep in zip(slots, episodes, strict=True):
            assert ep.description, "every episode needs a task description"
            self.rngs[slot] = np.random.default_rng(ep.seed)
            self.prompts[slot] = self.bench.policy_task(ep.task)

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        got = {k for k in batch if k.startswith("observation")}
        assert got == set(self.expected), f"batch keys {sorted(got)} != {sorted(self.expected)}"
        for key, (shape, dtype) in self.expected.items():
            arr = np.asarray(batch[key])
            assert arr.shape == (len(slots), *shape), f"{key}: shape {arr.shape}, expected {(len(slots), *shape)}"
            assert arr.dtype == np.dtype(dtype), f"{key}: dtype {arr.dtype}, expected {dtype}"
            assert np.isfinite(arr).all(), f"{key} has non-finite values"
        # lerobot-eval's task strings ("" where its env shows none, as on ALOHA), row by row
        assert list(batch["task"]) == [self.prompts[s] for s in slots], batch["task"]
        low, high = self.space.low, self.space.high
        return np.stack([self.rngs[s].uniform(low, high).astype(self.space.dtype) for s in slots])


def aloha_pixels(ctx: Any) -> _Checking:
    """ALOHA, --env.obs_type=pixels: only the top camera, 480x640 RGB."""
    return _Checking(ctx, {"observation.images.top": ((480, 640, 3), "uint8")})


def aloha_pixels_agent_pos(ctx: Any) -> _Checking:
    """ALOHA, --env.obs_type=pixels_agent_pos: top camera + 14 joint positions."""
    return _Checking(ctx, {"observation.images.top": ((480, 640, 3), "uint8"), "observation.state": ((14,), "float64")})


def libero_default(ctx: Any) -> _Checking:
    """LIBERO, defaults: two cameras (image, image2) at the installed LeRobot's default size
    (360x360 with 0.6, 256x256 with 0.4.4) + the processor's 8-d state."""
    from rollbench.lerobot_line import before_0_5

    size = 256 if before_0_5() else 360
    return _Checking(ctx, {
        "observation.images.image": ((size, size, 3), "uint8"),
        "observation.images.image2": ((size, size, 3), "uint8"),
        "observation.state": ((8,), "float32"),
    })


class _LiberoInitStateCheck:
    """LIBERO with `--env.num_steps_wait=0 --env.state_keys=robot_state/joints/pos`: the first
    observation of episode i must hold the arm joints of the task's `init_states[i % n]`
    (a flattened state is [time, qpos, qvel]; the arm's 7 joints are qpos[0:7]). Zero actions."""

    cheap = True

    def __init__(self, ctx: Any) -> None:
        self.bench = ctx.benchmark
        self.space = ctx.action_space
        self.expected: dict[int, tuple[int, np.ndarray]] = {}  # slot -> (episode index, joints)

    def reset(self, slots: Sequence[int], episodes: Sequence[Any]) -> None:
        for slot, ep in zip(slots, episodes, strict=True):
            init = self.bench.initial_states(ep.task)
            self.expected[slot] = (ep.episode_index, init[ep.episode_index % len(init)][1:8])

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        state = np.asarray(batch["observation.state"])
        for row, slot in enumerate(slots):
            if slot in self.expected:  # the episode's first step
                index, joints = self.expected.pop(slot)
                assert np.array_equal(state[row], joints), f"episode {index} did not start from init_states[{index} % n]"
        return np.zeros((len(slots), *self.space.shape), dtype=self.space.dtype)


def libero_init_state_check(ctx: Any) -> _LiberoInitStateCheck:
    return _LiberoInitStateCheck(ctx)
