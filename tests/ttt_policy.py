"""A policy that trains at test time, for `--policy.type=module --policy.path=ttt_policy:make`.

A linear layer maps the fake benchmark's state (position, target) to an action and takes one
SGD step on its own weights in every call, toward the step that points at the target: its
actions drift with every row it has seen, in whatever order, batch and process it saw them. It
explores with noise from torch's global random stream, which its other episodes share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch


class SelfTrainingPolicy:
    per_slot_state = True  # no episode state of its own: only the weights it keeps changing

    def __init__(self, lr: float = 0.5) -> None:
        generator = torch.Generator().manual_seed(0)  # the same start in every process
        self.net = torch.nn.Linear(4, 2)
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.rand(p.shape, generator=generator) - 0.5)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        state = torch.as_tensor(np.asarray(batch["observation.environment_state"]), dtype=torch.float32)
        action = torch.tanh(self.net(state) + 0.05 * torch.randn(len(slots), 2))  # exploration noise: torch's global stream
        goal = torch.clamp((state[:, 2:] - state[:, :2]) / 0.1, -1.0, 1.0)  # what the fake expert does
        loss = ((action - goal) ** 2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return action.detach().numpy()


def make() -> SelfTrainingPolicy:
    return SelfTrainingPolicy()
