"""A tiny random-init VLA-JEPA checkpoint (LeRobot 0.6's "vla_jepa"), built without the Hugging Face hub.

VLA-JEPA is a Qwen3-VL (`qwen_model_name`, loaded with `from_pretrained`, weights and processor)
whose action tokens condition a flow-matching DiT head, plus a V-JEPA 2 world model
(`jepa_encoder_name`) that only training uses: `enable_world_model=False` leaves it out. The
tiny Qwen3-VL is tests/vla_groot17.py's (text 64 wide, one layer; vision 32 wide, one block,
32x32 frames), saved with random weights into a directory beside the checkpoint,
`backbone_dir(out)`, whose absolute path the checkpoint stores: it must stay there.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.config.env import BenchmarkConfig


def backbone_dir(out: Path) -> Path:
    """Where `make_vla_jepa_checkpoint(out, ...)` puts the Qwen3-VL that `out` names."""
    return out.with_name(out.name + "-qwen3-vl")


def make_tiny_qwen3_vl_weights(path: Path) -> Path:
    """vla_groot17's tiny Qwen3-VL (config, processor) in `path`, with random-init weights."""
    from transformers import AutoConfig, Qwen3VLForConditionalGeneration

    from vla_groot17 import make_tiny_qwen3_vl

    made = make_tiny_qwen3_vl(path.with_name(path.name + "-home"))
    shutil.copytree(made, path, dirs_exist_ok=True)
    shutil.rmtree(path.with_name(path.name + "-home"))
    Qwen3VLForConditionalGeneration(AutoConfig.from_pretrained(path)).save_pretrained(path)
    return path


def make_vla_jepa_checkpoint(out: Path, benchmark: BenchmarkConfig, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init VLA-JEPA for `benchmark`'s features into `out`, the way lerobot-train does.

    Its Qwen3-VL goes to `backbone_dir(out)`. No world model; images resized to 32x32; chunks of 8,
    of which 4 are executed, after 4 denoising steps; a one-layer DiT head 32 wide;
    `overrides` replace any `VLAJEPAConfig` field.
    """
    from lerobot.policies.factory import get_policy_class, make_policy_config

    inputs, outputs = policy_features(benchmark)
    torch.manual_seed(seed)
    qwen = make_tiny_qwen3_vl_weights(backbone_dir(out)).resolve()
    small: dict[str, Any] = {
        "device": "cpu",
        "qwen_model_name": str(qwen),
        "torch_dtype": "float32",
        "enable_world_model": False,
        "resize_images_to": (32, 32),
        "chunk_size": 8,
        "n_action_steps": 4,
        "num_inference_timesteps": 4,
        "num_action_tokens_per_timestep": 1,
        "num_embodied_action_tokens_per_instruction": 4,
        "action_hidden_size": 32,
        "action_num_layers": 1,
        "num_target_vision_tokens": 4,
        "action_max_seq_len": 64,
    }
    small.update(overrides)
    cfg = make_policy_config("vla_jepa", input_features=inputs, output_features=outputs, **small)
    policy = get_policy_class("vla_jepa")(cfg)
    return save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))
