"""Workloads for bench/throughput.py, and the policies their raw loops use."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

WORKLOADS: dict[str, dict[str, str]] = {
    # simulation-bound: MetaWorld's scripted experts
    "mt10-expert": {"env.type": "metaworld", "env.task": "mt10", "policy.type": "expert"},
    # inference in the loop: a 2x256 torch MLP on the 39-d state, in the driver, batched
    # rendering-bound: 256x256 camera images every step, random actions
    "mt10-pixels": {
        "env.type": "metaworld", "env.task": "mt10", "policy.type": "random", "env.obs_type": "pixels_agent_pos",
        "env.observation_width": "256", "env.observation_height": "256",
    },
    "mt10-mlp": {
        "env.type": "metaworld", "env.task": "mt10", "policy.type": "module",
        "policy.path": "bench_policies:mlp_policy",
    },
}


class MLPPolicy:
    """A deterministic random-init MLP (39 -> 256 -> 256 -> 4) with torch on the CPU."""

    def __init__(self) -> None:
        import torch

        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(0)
        self.torch = torch
        self.net = torch.nn.Sequential(
            torch.nn.Linear(39, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4),
        )
        for p in self.net.parameters():
            p.data = torch.randn(p.shape, generator=g) * 0.05
        self.net.eval()

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        with self.torch.inference_mode():
            x = self.torch.as_tensor(np.asarray(batch["observation.environment_state"], dtype=np.float32))
            return self.torch.tanh(self.net(x)).numpy()


def mlp_policy() -> MLPPolicy:
    return MLPPolicy()


def make_raw_policy(workload: str, bench: Any, unit: Any) -> Any:
    """features of one env -> action, for the raw ceiling loop."""
    if workload == "mt10-expert":
        return bench.expert(unit.task)
    if workload == "mt10-pixels":
        rng = np.random.default_rng(unit.seed)
        return lambda features: rng.uniform(-1.0, 1.0, 4).astype(np.float32)
    net = _mlp()

    def act(features: dict[str, Any]) -> np.ndarray:
        return net.act({k: v[None] for k, v in features.items()}, [0])[0]

    return act


@functools.cache
def _mlp() -> MLPPolicy:
    return MLPPolicy()
