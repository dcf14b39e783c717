"""A tiny random-init GR00T N1.7 checkpoint (LeRobot 0.6's `groot` policy), built without the Hugging Face hub.

LeRobot 0.6.1's GR00T N1.7 is, like 0.4.4's N1.5, not built from its own config alone: `GrootPolicy`
always loads a saved `GR00TN17` from `base_model_path` (also when it loads a fine-tuned checkpoint,
whose weights then replace the base's). What is hard-coded, and how this builder gets around it:

- The base model's backbone is named by its config's `model_name` (default
  `nvidia/Cosmos-Reason2-2B`). For exactly that name LeRobot builds a hard-coded copy of the 2B
  Qwen3-VL config (28 text layers, 2048 wide: gigabytes of random weights); any other name is read
  with `AutoConfig.from_pretrained`. So the tiny base names a local directory holding a tiny
  `Qwen3VLConfig` (text 64 wide, one layer; vision 32 wide, one block, 8x8 patches). The directory
  lies under `home/Qwen/`, so its path contains `Qwen/Qwen3-VL` and LeRobot takes it for a Qwen3-VL
  backbone by name instead of warning that it assumes one.
- The action head reads the backbone's last kept text layer (`select_layer` = how many layers are
  kept) through a LayerNorm and a VL self-attention sized by `backbone_embedding_dim` (2048 in
  the real model): it must be the tiny text model's width.
- The preprocessor's VLM step tokenizes with the processor of `GROOT_N1_7_BACKBONE_MODEL`,
  hard-coded to `nvidia/Cosmos-Reason2-2B` when the pipeline is built (`make_groot_pre_post_processors`
  ignores the base's `model_name`). The step saves its `model_name` in `policy_preprocessor.json`,
  so the builder points that constant at the tiny backbone directory while it builds the
  pipelines: the saved checkpoint names the directory by its absolute path, and loading it needs
  no environment variable and no hub. That directory holds the tokenizer (the byte-level BPE of
  vla_helpers with Qwen's special tokens and a minimal Qwen-style chat template), the
  `Qwen2VLImageProcessor` and the `Qwen3VLVideoProcessor`.
- Images go to the VLM at the `image_target_size` of the base's `processor_config.json`
  (`processor_kwargs`, as NVIDIA's checkpoints carry it), else at a hard-coded 256x256 (crop
  230): the tiny base's sidecar says 32x32 without crop, which the 8x8 patches and the 2x2 merge
  turn into 4 image tokens per frame.

So three things are written: the backbone directory (`backbone_dir(home)`, the same for every
seed and checkpoint), the tiny `GR00TN17` beside the checkpoint (`base_model_dir(out)`, named by
its absolute path, so it must stay there), and the checkpoint itself, as `lerobot-train` leaves it
in `pretrained_model/`. A loading process needs only `HF_HUB_OFFLINE=1` (to be sure nothing is
fetched); nothing reads `HF_LEROBOT_HOME`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.config.env import BenchmarkConfig
from vla_helpers import QWEN_CHAT_TEMPLATE, byte_level_bpe

# SigLIP-style tower of Qwen3-VL: 32x32 frames in 8x8 patches, merged 2x2 into 4 image tokens.
_IMAGE_SIZE = 32
_PATCH_SIZE = 8
_MERGE_SIZE = 2
# Width of the (one-layer) Qwen3 text model, and so of `backbone_embedding_dim`.
_TEXT_WIDTH = 64
# Width of the action head: its DiT (2 heads of 16), the state and action encoders.
_WIDTH = 32
# Steps per action chunk the model predicts.
_ACTION_HORIZON = 16
# Qwen's chat markers, padding and vision tokens.
_PAD, _IM_START, _IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
_VISION_START, _VISION_END = "<|vision_start|>", "<|vision_end|>"
_IMAGE_PAD, _VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"


def backbone_dir(home: Path) -> Path:
    """Where the tiny Qwen3-VL backbone (config and processor) goes under `home`."""
    return home / "Qwen" / "Qwen3-VL-tiny"


def base_model_dir(out: Path) -> Path:
    """Where `make_groot17_checkpoint(out, ...)` puts the `GR00TN17` that `out` names as `base_model_path`."""
    return out.with_name(out.name + "-gr00t")


def _byte_tokenizer() -> Any:
    """The byte-level BPE (vla_helpers.byte_level_bpe) with Qwen's special tokens and chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=byte_level_bpe(),
        pad_token=_PAD,
        eos_token=_IM_END,
        extra_special_tokens=[_IM_START, _VISION_START, _VISION_END, _IMAGE_PAD, _VIDEO_PAD],
        chat_template=QWEN_CHAT_TEMPLATE,
        model_input_names=["input_ids", "attention_mask"],
    )


def make_tiny_qwen3_vl(home: Path) -> Path:
    """Write the tiny Qwen3-VL backbone directory (`backbone_dir(home)`) and return it.

    It holds what `AutoConfig` reads for the base model's backbone and what the preprocessor's
    VLM step reads (`AutoTokenizer`, `Qwen2VLImageProcessor`, `Qwen3VLVideoProcessor`), and no
    weights: the base model saves its backbone's. The files do not depend on a seed.
    """
    from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLProcessor, Qwen3VLVideoProcessor

    path = backbone_dir(home)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _byte_tokenizer()
    specials = (_PAD, _IM_END, _VISION_START, _VISION_END, _IMAGE_PAD, _VIDEO_PAD)
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in specials}
    head_dim = _TEXT_WIDTH // 2
    text = {
        "model_type": "qwen3_vl_text", "vocab_size": len(tokenizer), "hidden_size": _TEXT_WIDTH,
        "intermediate_size": 2 * _TEXT_WIDTH, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": head_dim, "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "pad_token_id": ids[_PAD], "eos_token_id": ids[_IM_END],
        # Multimodal RoPE: the (temporal, height, width) sections share head_dim / 2 = 16 frequencies.
        "rope_parameters": {
            "rope_type": "default", "rope_theta": 5e6, "mrope_interleaved": True, "mrope_section": [6, 5, 5],
        },
    }
    grid = _IMAGE_SIZE // _PATCH_SIZE
    vision = {
        "model_type": "qwen3_vl", "depth": 1, "hidden_size": _WIDTH, "intermediate_size": 2 * _WIDTH,
        "num_heads": 2, "patch_size": _PATCH_SIZE, "spatial_merge_size": _MERGE_SIZE, "temporal_patch_size": 2,
        "out_hidden_size": _TEXT_WIDTH, "num_position_embeddings": grid * grid, "deepstack_visual_indexes": [0],
    }
    config = Qwen3VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=True,
        image_token_id=ids[_IMAGE_PAD], video_token_id=ids[_VIDEO_PAD],
        vision_start_token_id=ids[_VISION_START], vision_end_token_id=ids[_VISION_END],
    )
    config.save_pretrained(path)
    pixels = {"shortest_edge": _IMAGE_SIZE * _IMAGE_SIZE, "longest_edge": _IMAGE_SIZE * _IMAGE_SIZE}
    patches = {"patch_size": _PATCH_SIZE, "merge_size": _MERGE_SIZE, "temporal_patch_size": 2}
    half = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=pixels, **patches, **half),
        video_processor=Qwen3VLVideoProcessor(size=pixels, **patches, **half),
        tokenizer=tokenizer,
        chat_template=QWEN_CHAT_TEMPLATE,
    )
    processor.save_pretrained(path)
    return path


def make_tiny_gr00t17(path: Path, home: Path, seed: int, max_state_dim: int, max_action_dim: int) -> Path:
    """Save a tiny random-init `GR00TN17` (seeded by `seed`) into `path`, for `base_model_path`.

    Backbone: the tiny Qwen3-VL of `backbone_dir(home)` (one text layer kept, 64 wide). Action
    head: flow matching over 16 steps of `max_action_dim`, 4 denoising steps, a four-block
    alternating DiT (text, self, image, self cross-attention) 32 wide and a one-layer VL
    self-attention 64 wide; 32 embodiments (`new_embodiment` is embodiment 10). The state and
    action widths must be the policy config's `max_state_dim` and `max_action_dim`: the
    preprocessor pads to those. Beside the weights goes the `processor_config.json` that sets
    the VLM's image size.
    """
    from lerobot.policies.groot.groot_n1_7 import GR00TN17, GR00TN17Config

    backbone = make_tiny_qwen3_vl(home)
    dit = {
        "positional_embeddings": None, "num_layers": 4, "num_attention_heads": 2, "attention_head_dim": _WIDTH // 2,
        "norm_type": "ada_norm", "dropout": 0.2, "final_dropout": True, "output_dim": _WIDTH,
        "interleave_self_attention": True,
    }
    vl_attention = {
        "positional_embeddings": None, "num_layers": 1, "num_attention_heads": 2,
        "attention_head_dim": _TEXT_WIDTH // 2, "dropout": 0.2, "final_dropout": True,
    }
    image = {"image_target_size": [_IMAGE_SIZE, _IMAGE_SIZE], "image_crop_size": [_IMAGE_SIZE, _IMAGE_SIZE]}
    config = GR00TN17Config(
        model_name=str(backbone), model_dtype="float32", dtype="float32", select_layer=1,
        backbone_embedding_dim=_TEXT_WIDTH, hidden_size=_WIDTH, input_embedding_dim=_WIDTH,
        max_state_dim=max_state_dim, max_action_dim=max_action_dim, action_horizon=_ACTION_HORIZON,
        diffusion_model_cfg=dit, vl_self_attention_cfg=vl_attention, **image,
    )
    torch.manual_seed(seed)
    model = GR00TN17(config, load_backbone_weights=False)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    (path / "processor_config.json").write_text(json.dumps({"processor_kwargs": image}, indent=2) + "\n")
    return path


@contextmanager
def _backbone_processor(backbone: Path) -> Iterator[None]:
    """Make the GR00T pipelines built meanwhile read their VLM processor from `backbone`."""
    from lerobot.policies.groot import processor_groot

    with mock.patch.object(processor_groot, "GROOT_N1_7_BACKBONE_MODEL", str(backbone)):
        yield


def skip_unless_groot_n17() -> None:
    """Skip the calling test where the installed LeRobot's `groot` is not GR00T N1.7 (0.4: N1.5)."""
    import importlib.util

    if importlib.util.find_spec("lerobot.policies.groot.groot_n1_7") is None:
        import pytest

        pytest.skip("this LeRobot's `groot` is GR00T N1.5 (tests/vla_groot.py builds that one)")


def make_groot17_checkpoint(out: Path, benchmark: BenchmarkConfig, home: Path, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init GR00T N1.7 for `benchmark`'s features into `out`, the way lerobot-train does.

    Writes the backbone directory under `home` and the base model to `base_model_dir(out)` (see
    the module's docstring: loading `out` needs both where they were written). The same `seed`
    gives the same weights. Chunks are 16 steps, of which the first `n_action_steps` (8) are
    executed; `use_bf16=False` keeps the model in float32 on a CPU; `overrides` replace any
    `GrootConfig` field (`max_state_dim` and `max_action_dim` also size the base model).
    """
    skip_unless_groot_n17()
    from lerobot.policies.factory import get_policy_class, make_policy_config

    inputs, outputs = policy_features(benchmark)
    small: dict[str, Any] = {
        "device": "cpu",
        "use_bf16": False,
        "chunk_size": _ACTION_HORIZON,
        "n_action_steps": 8,
        "max_state_dim": 8,
        "max_action_dim": 8,
    }
    small.update(overrides)
    base = make_tiny_gr00t17(
        base_model_dir(out).resolve(), home.resolve(), seed, small["max_state_dim"], small["max_action_dim"]
    )
    small.setdefault("base_model_path", str(base))
    cfg = make_policy_config("groot", input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    policy = get_policy_class("groot")(cfg)
    with _backbone_processor(backbone_dir(home.resolve())):
        return save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))
