"""Policy plugins that rollbench must refuse in one line (tests/test_guides.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rollbench.config.fields import opt
from rollbench.policies.base import POLICIES, Policy, PolicyContext


@POLICIES.register("duck")
class DuckPolicy:
    """Has act and reset, but is no Policy."""

    def __init__(self, ctx: PolicyContext) -> None:
        self.shape = ctx.action_space.shape

    def reset(self, slots: Any, episodes: Any) -> None:
        pass

    def act(self, batch: Any, slots: Any) -> np.ndarray:
        return np.zeros((len(slots), *self.shape))


@dataclass(frozen=True)
class ClashOptions:
    device: str = opt("cpu", "a flag every policy type already takes")


@POLICIES.register("clash")
class ClashPolicy(Policy):
    """Declares --policy.device as its own."""

    options_class = ClashOptions

    def act(self, batch: Any, slots: Any) -> np.ndarray:
        raise AssertionError("never built")
