"""X-VLA's own env processors, applied where lerobot-eval applies them, never twice.

LeRobot 0.4.4 gives an X-VLA checkpoint X-VLA's LIBERO pipelines in place of the env's
(`make_env_pre_post_processors` -> `make_xvla_libero_pre_post_processors`), whatever the env:

- pre: X-VLA's `LiberoProcessorStep` (the agent-view image rotated by 180 degrees, the wrist
  image not; a 20-d state: eef position, the first two columns of the eef rotation matrix,
  a 0, then 10 zeros), ImageNet normalisation of every image, and a domain id;
- post: the model's `[eef position 3, rotation 6D 6, gripper 1, ...]` into LIBERO's 7-d
  action (axis-angle; gripper -1 or 1).

What rollbench does with them:

- X-VLA runs where they fit, LIBERO: `--env.type=libero`, or LeRobot's own LIBERO through
  the bridge (`--env.type=lerobot --env.name=libero`). Anywhere else it is refused in one
  line (lerobot-eval fails there at the first step: the 6D-rotation post-processor).
- The benchmark's own processors are not applied (`env_processors`): the adapter gets the
  observation as LeRobot's `preprocess_observation` leaves it (`BenchmarkConfig.lerobot_observation`:
  images as rendered, the `observation.robot_state` tree) and runs LeRobot's own pipeline steps on it, between
  `preprocess_observation` and the policy's pre-processor, where lerobot-eval runs them.
- An env step that the checkpoint's own pre-processor also has is dropped: a checkpoint
  saved by `make_pre_post_processors` normalises images and adds the domain id itself, and
  lerobot-eval 0.4.4, which applies both twice, fails on it (`xvla_image_to_float` raises on
  ImageNet-normalised images; LeRobot issue #2955). A checkpoint whose pre-processor lacks
  them (the hub's lerobot/xvla-libero, LeRobot issue #2954) keeps every env step:
  lerobot-eval's behaviour, action for action.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rollbench.config.env import BenchmarkConfig
from rollbench.errors import ConfigError
from rollbench.policies.lerobot_check import Given

#: the state X-VLA's LIBERO step builds: eef position (3), rotation 6D (6), a 0, then 10 zeros
STATE_DIM = 20
#: what its action post-processor reads: eef position (3), rotation 6D (6), gripper (1)
MIN_ACTION_DIM = 10


def libero_kind(bench: BenchmarkConfig) -> str | None:
    """"native" (rollbench's LIBERO), "bridge" (LeRobot's, through --env.type=lerobot), or None."""
    if bench.type_name == "libero":
        return "native"
    if bench.type_name == "lerobot" and getattr(bench, "name", "") == "libero":
        return "bridge"
    return None


def require_libero(bench: BenchmarkConfig, ckpt: Path, ptype: str) -> None:
    if libero_kind(bench) is None:
        raise ConfigError(
            f"--policy.path={ckpt}: an {ptype!r} checkpoint comes with LeRobot's X-VLA env processors, which are "
            f"written for LIBERO only (their 6D-rotation action post-processor fails on any other env, in lerobot-eval "
            f"too); evaluate it on --env.type=libero or --env.type=lerobot --env.name=libero, not "
            f"--env.type={bench.type_name}"
        )


def env_config(bench: BenchmarkConfig) -> Any:
    """LeRobot's env config of the benchmark (the bridge's own; LeRobot's LIBERO default)."""
    if libero_kind(bench) == "bridge":
        return bench.lerobot  # type: ignore[attr-defined]
    from lerobot.envs.configs import LiberoEnv  # optional: lerobot

    return LiberoEnv()


def env_pipelines(policy_cfg: Any, bench: BenchmarkConfig, policy_pre: Any) -> tuple[Any, Any, list[str]]:
    """(env pre-processor, env post-processor, names of the env steps dropped): LeRobot's own,
    minus the steps the checkpoint's pre-processor `policy_pre` already has."""
    from lerobot.envs.factory import make_env_pre_post_processors  # optional: lerobot

    pre, post = make_env_pre_post_processors(env_cfg=env_config(bench), policy_cfg=policy_cfg)
    own = {type(step) for step in policy_pre.steps}
    dropped = [type(step).__name__ for step in pre.steps if type(step) in own]
    if dropped:
        pre = dataclasses.replace(pre, steps=[step for step in pre.steps if type(step) not in own])
    return pre, post, dropped


def model_action_dim(cfg: Mapping[str, Any]) -> int | None:
    """What the model emits: its action space's width (`ee6d`: 20), or the checkpoint's
    action feature under `action_mode=auto`."""
    mode = str(cfg.get("action_mode") or "ee6d")
    if mode == "auto":
        shape = list(((cfg.get("output_features") or {}).get("action") or {}).get("shape") or [])
        return int(shape[0]) if len(shape) == 1 else None
    from lerobot.policies.xvla.action_hub import ACTION_REGISTRY  # optional: lerobot

    space = ACTION_REGISTRY.get(mode)
    return int(space.dim_action) if space is not None else None


def policy_view(gives: Mapping[str, Any], width: int | None) -> tuple[dict[str, Any], Any]:
    """The benchmark's features and action space as an X-VLA sees them through its env
    processors, for `lerobot_check.preflight`: the 20-d state, and the model's action width
    `width` (`model_action_dim`; the post-processor turns it into LIBERO's 7 dims).

    Imports nothing of LeRobot: `rollbench check` calls it with an env alive in the process,
    and importing torchvision's ops (triton) after LIBERO's EGL context segfaults."""
    out = dict(gives)
    state = out.get("observation.state")
    if state is not None:
        out["observation.state"] = Given("STATE", (STATE_DIM,), "float32" if state.dtype else "")
    if width is None or width < MIN_ACTION_DIM:
        width = MIN_ACTION_DIM  # the preflight's action row then names the mismatch
    return out, gym.spaces.Box(-np.inf, np.inf, (width,), np.float32)
