"""What watching a policy's weights costs per call (`policies/weights.py`).

    PYTHONPATH=src:tests HF_HUB_OFFLINE=1 python bench/weight_watch.py

For tiny random-init LeRobot ACT and Diffusion checkpoints of the fake benchmark (built
offline by tests/lerobot_helpers.py), and for stacks of linear layers standing in for larger
networks: the watch's time per call (`StepContext` finding the watch, `WeightWatch.changed`)
beside the whole `StepContext.act`. Each figure is the best of several repeats: the machine's
other jobs only add to it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lerobot_helpers import make_checkpoint
from rollbench.benchmarks.fake import FakeConfig
from rollbench.config.policy import PolicyConfig
from rollbench.episode.context import StepContext
from rollbench.policies.base import EpisodeStart
from rollbench.policies.weights import WeightWatch


def per_call_us(fn: Callable[[], Any], n: int, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def main() -> None:
    bench = FakeConfig(task="near")
    obs = {"agent_pos": np.zeros((1, 2)), "environment_state": np.array([[0.0, 0.0, 0.2, 0.1]])}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("act", "diffusion"):
            ckpt = make_checkpoint(Path(tmp) / kind, bench, policy_type=kind, action_mean=0.0, action_std=1.0)
            ctx = StepContext(bench, PolicyConfig(type="lerobot", path=str(ckpt)))
            policy = ctx.make_policy()
            policy.reset([0], [EpisodeStart("all", "near", "", 0, 1)])
            ctx.act(policy, obs, [0], [""])
            watch = ctx._watch(policy)
            assert watch is not None

            def check(ctx: StepContext = ctx, policy: Any = policy) -> int:
                found = ctx._watch(policy)  # what StepContext.act does around each call
                return found.changed() if found is not None else 0

            watch_us = per_call_us(check, 2000, 7)
            act_us = per_call_us(lambda: ctx.act(policy, obs, [0], [""]), 100, 3)  # noqa: B023
            print(f"{kind}: {len(watch)} parameter tensors: watch {watch_us:.1f} us per call; "
                  f"StepContext.act {act_us:.0f} us per call (mean over its chunk), watch included")
            policy.close()
    for n in (100, 500, 1500):
        net = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(n // 2)])
        stand_in = WeightWatch([net])
        print(f"{len(stand_in)} parameter tensors: watch {per_call_us(stand_in.changed, 2000, 7):.1f} us per call")


if __name__ == "__main__":
    main()
