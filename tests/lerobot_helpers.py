"""Small random-init LeRobot checkpoints for the adapter's tests and bench/vs_lerobot.py.

A checkpoint is what `lerobot-train` leaves in `pretrained_model/`: `config.json`,
`model.safetensors` and the processor pipelines (`policy_preprocessor.json`,
`policy_postprocessor.json` with their normalizer stats). LeRobot 0.4.4 refuses a
checkpoint without the pipelines, so they are saved from `make_pre_post_processors`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rollbench.config.env import BenchmarkConfig


def policy_features(benchmark: BenchmarkConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(input_features, output_features) in LeRobot's types, images channel-first."""
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    for key, ft in benchmark.features.items():
        kind = FeatureType[ft.type]
        shape = tuple(ft.shape)
        if kind is FeatureType.VISUAL:
            h, w, c = shape
            shape = (c, h, w)
        (outputs if kind is FeatureType.ACTION else inputs)[key] = PolicyFeature(type=kind, shape=shape)
    return inputs, outputs


def dataset_stats(inputs: dict[str, Any], outputs: dict[str, Any], action_mean: float, action_std: float) -> dict[str, Any]:
    """Plausible normalisation stats: images in [0, 1], states and actions around `action_mean`."""
    from lerobot.configs.types import FeatureType

    stats: dict[str, Any] = {}
    for key, ft in {**inputs, **outputs}.items():
        if ft.type is FeatureType.VISUAL:
            c = ft.shape[0]
            stats[key] = {
                "mean": torch.full((c, 1, 1), 0.5), "std": torch.full((c, 1, 1), 0.25),
                "min": torch.zeros(c, 1, 1), "max": torch.ones(c, 1, 1),
            }
        else:
            (d,) = ft.shape
            stats[key] = {
                "mean": torch.full((d,), action_mean), "std": torch.full((d,), action_std),
                "min": torch.full((d,), action_mean - 2 * action_std), "max": torch.full((d,), action_mean + 2 * action_std),
            }
    return stats


def make_checkpoint(
    out: Path,
    benchmark: BenchmarkConfig,
    policy_type: str = "act",
    seed: int = 0,
    action_mean: float = 256.0,
    action_std: float = 100.0,
    inputs: dict[str, Any] | None = None,
    **overrides: Any,
) -> Path:
    """Save a tiny random-init policy of `policy_type` for `benchmark`'s features into `out`.

    `inputs` replaces the input features (e.g. an ALOHA-shaped state to test the mismatch error).
    """
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    bench_inputs, outputs = policy_features(benchmark)
    inputs = bench_inputs if inputs is None else inputs
    small: dict[str, Any] = {"device": "cpu"}
    if policy_type == "act":
        small.update(
            chunk_size=10, n_action_steps=10, dim_model=32, n_heads=2, dim_feedforward=64,
            n_encoder_layers=1, n_decoder_layers=1, n_vae_encoder_layers=1, latent_dim=8,
            pretrained_backbone_weights=None,
        )
    elif policy_type == "diffusion":
        small.update(
            n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=(32, 64), kernel_size=3, n_groups=4,
            diffusion_step_embed_dim=32, num_inference_steps=4, num_train_timesteps=10,
            pretrained_backbone_weights=None, spatial_softmax_num_keypoints=8,
            crop_shape=None, use_group_norm=True,
        )
    small.update(overrides)
    cfg = make_policy_config(policy_type, input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    policy = get_policy_class(policy_type)(cfg)
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    pre, post = make_pre_post_processors(cfg, dataset_stats=dataset_stats(inputs, outputs, action_mean, action_std))
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out
