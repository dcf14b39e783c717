"""A tiny random-init EO-1 checkpoint (LeRobot 0.6's "eo1"), built without the Hugging Face hub.

EO-1 is a Qwen2.5-VL that reads the image, a state token and the task, and a flow-matching
head that denoises the action tokens' hidden states. Two things it loads by the one name
`vlm_base` (default `Qwen/Qwen2.5-VL-3B-Instruct`):

* the backbone's config, read at config time unless `vlm_config` is given; with `vlm_config`
  and `pretrained_path` set (as a saved checkpoint has them), the backbone is built from that
  dict, not loaded. The builder gives a tiny one (text 64 wide, one layer; vision 32 wide, one
  block).
* the processor (`Qwen2_5_VLProcessor`, its `eo1_qwen_processor` step), which adds EO-1's seven
  special tokens to the tokenizer. `backbone_dir(out)` holds a tiny one: the byte-level BPE of
  vla_helpers with Qwen's special tokens and a minimal chat template (system, user, assistant
  messages of images and text), and a `Qwen2VLImageProcessor` with 14x14 patches merged 2x2.

The checkpoint names the directory by its absolute path, so it must stay where it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.config.env import BenchmarkConfig
from vla_helpers import QWEN_CHAT_TEMPLATE, byte_level_bpe

_PAD, _IM_START, _IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
_VISION_START, _VISION_END = "<|vision_start|>", "<|vision_end|>"
_IMAGE_PAD, _VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"
_TEXT_WIDTH = 64
_EO1_TOKENS = 7  # the special tokens EO-1's processor step adds to the tokenizer


def backbone_dir(out: Path) -> Path:
    """Where `make_eo1_checkpoint(out, ...)` puts the processor that `out` names as `vlm_base`."""
    return out.with_name(out.name + "-qwen2_5_vl")


def make_tiny_qwen2_5_vl(path: Path) -> dict[str, Any]:
    """Save the tiny processor into `path`; return the matching backbone config as a dict (`vlm_config`)."""
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2_5_VLConfig,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=byte_level_bpe(), pad_token=_PAD, eos_token=_IM_END,
        extra_special_tokens=[_IM_START, _VISION_START, _VISION_END, _IMAGE_PAD, _VIDEO_PAD],
        chat_template=QWEN_CHAT_TEMPLATE, model_input_names=["input_ids", "attention_mask"],
    )
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in (_PAD, _IM_END, _VISION_START, _VISION_END, _IMAGE_PAD, _VIDEO_PAD)}
    text = {
        "vocab_size": len(tokenizer) + _EO1_TOKENS, "hidden_size": _TEXT_WIDTH, "intermediate_size": 2 * _TEXT_WIDTH,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 2048,
        "pad_token_id": ids[_PAD], "eos_token_id": ids[_IM_END], "bos_token_id": None,
        # multimodal RoPE: the (temporal, height, width) sections share head_dim / 2 = 16 frequencies
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]},
    }
    vision = {
        "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": _TEXT_WIDTH,
        "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 56,
        "fullatt_block_indexes": [0],
    }
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids[_IMAGE_PAD], video_token_id=ids[_VIDEO_PAD],
        vision_start_token_id=ids[_VISION_START], vision_end_token_id=ids[_VISION_END],
    )
    patches = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**patches), video_processor=Qwen2VLVideoProcessor(**patches),
        tokenizer=tokenizer, chat_template=QWEN_CHAT_TEMPLATE,
    )
    path.mkdir(parents=True, exist_ok=True)
    processor.save_pretrained(path)
    config.save_pretrained(path)
    return config.to_dict()


def make_eo1_checkpoint(out: Path, benchmark: BenchmarkConfig, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init EO-1 for `benchmark`'s features into `out`, the way lerobot-train does.

    Its processor goes to `backbone_dir(out)`. Images are resized to at most 56x56 (4 image
    tokens after the 2x2 merge); chunks of 8, of which 4 are executed, after 4 denoising steps;
    the state and action padded to 8; `overrides` replace any `EO1Config` field.
    """
    from lerobot.policies.factory import get_policy_class, make_policy_config

    inputs, outputs = policy_features(benchmark)
    vlm = backbone_dir(out).resolve()
    small: dict[str, Any] = {
        "device": "cpu",
        "vlm_base": str(vlm),
        "vlm_config": make_tiny_qwen2_5_vl(vlm),
        "pretrained_path": str(vlm),  # build the backbone from `vlm_config`, not from pretrained weights
        "dtype": "float32",
        "image_min_pixels": 56 * 56,
        "image_max_pixels": 56 * 56,
        "chunk_size": 8,
        "n_action_steps": 4,
        "num_denoise_steps": 4,
        "max_state_dim": 8,
        "max_action_dim": 8,
    }
    small.update(overrides)
    cfg = make_policy_config("eo1", input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    policy = get_policy_class("eo1")(cfg)
    return save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))
