"""A tiny random-init Multi-Task DiT checkpoint (LeRobot 0.6's "multi_task_dit"), built without the hub.

Multi-Task DiT builds its CLIP vision and text encoders with `from_pretrained(name)` at
construction (the names must contain "clip"), and its preprocessor loads the CLIP tokenizer by
the same name. A local directory with a tiny random-init `CLIPModel` and a byte-level tokenizer
keeps the tests offline and small; the checkpoint's own weights replace the directory's when
it loads. The checkpoint stores the directory's absolute path (in `config.json` and
`policy_preprocessor.json`), so it is written beside the checkpoint, at `clip_dir(out)`, and
must stay there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.config.env import BenchmarkConfig
from vla_helpers import byte_level_bpe

_BOS, _EOS, _PAD = "<|startoftext|>", "<|endoftext|>", "<pad>"
_TEXT_LENGTH = 16  # tokens per prompt (CLIP's 77 by default), padded to it


def clip_dir(out: Path) -> Path:
    """Where `make_multi_task_dit_checkpoint(out, ...)` puts the CLIP that `out` refers to (its
    name must contain "clip": Multi-Task DiT refuses any other)."""
    return out.with_name(out.name + "-tiny-clip")


def make_tiny_clip(path: Path, image_size: int) -> Path:
    """Save a tiny random-init CLIP (weights, config) and a byte-level tokenizer into `path`.

    Text: 1 layer, width 32, the tokenizer's vocabulary; each prompt is wrapped in CLIP's
    start/end tokens, so the empty one ("" on PushT) still has a token to attend to. Vision:
    1 layer, width 32, `image_size` pixels in 16x16 patches.
    """
    from tokenizers.processors import TemplateProcessing
    from transformers import CLIPConfig, CLIPModel, PreTrainedTokenizerFast

    raw = byte_level_bpe(leading=(_PAD, _BOS, _EOS))
    raw.post_processor = TemplateProcessing(single=f"{_BOS} $A {_EOS}", special_tokens=[(_BOS, 1), (_EOS, 2)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token=_BOS, eos_token=_EOS, pad_token=_PAD,
                                        model_max_length=_TEXT_LENGTH)
    ids = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    text = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "max_position_embeddings": _TEXT_LENGTH, "projection_dim": 32, **ids}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": image_size, "patch_size": 16, "projection_dim": 32}
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=32))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_multi_task_dit_checkpoint(out: Path, benchmark: BenchmarkConfig, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init Multi-Task DiT for `benchmark`'s features into `out`, the way lerobot-train does.

    Its CLIP goes to `clip_dir(out)`. Two observations of history, chunks of 8 of which 4 are
    executed, 4 DDPM steps (of 10); a 1-layer transformer of width 32; images go to CLIP whole
    (no crop); `overrides` replace any `MultiTaskDiTConfig` field.
    """
    from lerobot.policies.factory import get_policy_class, make_policy_config

    inputs, outputs = policy_features(benchmark)
    sizes = {ft.shape[1:] for ft in inputs.values() if len(ft.shape) == 3}
    (size,) = sizes or {(96, 96)}
    clip = make_tiny_clip(clip_dir(out), size[0]).resolve()
    small: dict[str, Any] = {
        "device": "cpu",
        "vision_encoder_name": str(clip),
        "text_encoder_name": str(clip),
        "tokenizer_max_length": _TEXT_LENGTH,
        "image_crop_shape": None,
        "n_obs_steps": 2,
        "horizon": 8,
        "n_action_steps": 4,
        "num_train_timesteps": 10,
        "num_inference_steps": 4,
        "hidden_dim": 32,
        "num_layers": 1,
        "num_heads": 2,
        "timestep_embed_dim": 16,
    }
    small.update(overrides)
    cfg = make_policy_config("multi_task_dit", input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    policy = get_policy_class("multi_task_dit")(cfg)
    return save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))
