"""A policy for the video tests (`--policy.type=module --policy.path=helpers_video_policies:NAME`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class _PixelDriven:
    """Actions from the image alone (the mean colour of its four quadrants): any change in
    what the policy sees, down to one pixel's value, changes its episodes' rewards."""

    cheap = True  # runs inside the env workers

    def __init__(self, ctx: Any) -> None:
        self.dim = int(np.prod(ctx.action_space.shape))

    def reset(self, slots: Sequence[int], episodes: Sequence[Any]) -> None:
        pass

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        img = np.asarray(batch["observation.image"], dtype=np.float64)
        h, w = img.shape[1] // 2, img.shape[2] // 2
        quads = [img[:, :h, :w], img[:, :h, w:], img[:, h:, :w], img[:, h:, w:]]
        means = np.stack([q.mean(axis=(1, 2, 3)) for q in quads], axis=1)
        actions = np.tanh((means - 110.0) / 6.0)
        return np.resize(actions, (len(slots), self.dim)).astype(np.float32)


def pixel_driven(ctx: Any) -> _PixelDriven:
    return _PixelDriven(ctx)
