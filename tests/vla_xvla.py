"""A tiny random-init X-VLA checkpoint (LeRobot policy type "xvla"), built without the Hugging Face hub.

X-VLA has no pretrained-backbone switch: it builds its Florence-2 backbone (a DaViT image
encoder and a BART text encoder) from the `florence_config` dict stored in its config, and its
preprocessor loads a tokenizer by `tokenizer_name` (by default the hub's `facebook/bart-large`).
A tiny `florence_config` and a local byte-level tokenizer directory keep the tests offline and
small. The checkpoint stores the tokenizer directory's absolute path (in `config.json` and in
`policy_preprocessor.json`), so the directory is written beside the checkpoint, at
`tokenizer_dir(out)`, and must stay there.

Needs only what LeRobot's X-VLA needs (transformers, tokenizers, einops).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.config.env import BenchmarkConfig
from vla_helpers import byte_level_bpe

# BART's conventions: Florence-2's language config defaults to these ids (its embeddings use
# `pad_token_id` as padding index), so the tokenizer puts its special tokens there.
_BOS, _PAD, _EOS = "<s>", "<pad>", "</s>"
# The Florence-2 projection width, BART's `d_model` and DaViT's `projection_dim`: X-VLA merges
# the projected image tokens with the text embeddings, so all three must be equal.
_WIDTH = 32


def tokenizer_dir(out: Path) -> Path:
    """Where `make_xvla_checkpoint(out, ...)` puts the tokenizer that `out` refers to."""
    return out.with_name(out.name + "-tokenizer")


def make_byte_tokenizer(path: Path) -> Any:
    """Save a byte-level tokenizer with no merges into `path` and return it.

    Every byte is a token, so any task string encodes (the empty one too, as padding only);
    ids 0-2 are `<s>`, `<pad>`, `</s>` as in BART, and the bytes follow. Saved with
    `save_pretrained`, so LeRobot's `TokenizerProcessorStep` loads it with `AutoTokenizer`.
    """
    from transformers import PreTrainedTokenizerFast

    raw = byte_level_bpe(leading=(_BOS, _PAD, _EOS))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token=_BOS, pad_token=_PAD, eos_token=_EOS)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    return tokenizer


def tiny_florence_config(tokenizer: Any) -> dict[str, Any]:
    """A `florence_config` for `XVLAConfig`: DaViT with 4 one-layer stages, a 1-layer BART, width 32.

    DaViT's 4 strided stages (4, 2, 2, 2) turn a 96x96 image into a 3x3 map: X-VLA needs a
    square map, so images must be square (or `resize_imgs_with_padding` set). Each view gives
    10 tokens (its mean and the 9 cells). The vocabulary is the tokenizer's: the defaults are
    BART's 51k tokens, which would be most of the model. BART's decoder is built, then deleted
    by X-VLA, which uses the encoder only.
    """
    ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    vocab_size = len(tokenizer)
    vision = {
        "depths": [1, 1, 1, 1],
        "dim_embed": [8, 16, 16, _WIDTH],
        "num_heads": [1, 1, 2, 2],
        "num_groups": [1, 1, 2, 2],
        "window_size": 3,
        "drop_path_rate": 0.0,
        "projection_dim": _WIDTH,
        "image_pos_embed": {"type": "learned_abs_2d", "max_pos_embeddings": 16},
        "visual_temporal_embedding": {"type": "COSINE", "max_temporal_embeddings": 4},
    }
    text = {
        "vocab_size": vocab_size,
        "d_model": _WIDTH,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 2 * _WIDTH,
        "decoder_ffn_dim": 2 * _WIDTH,
        # Text tokens (tokenizer_max_length) plus the image's 10 must fit.
        "max_position_embeddings": 128,
        "decoder_start_token_id": tokenizer.eos_token_id,
        "forced_eos_token_id": tokenizer.eos_token_id,
        **ids,
    }
    return {
        "vision_config": vision,
        "text_config": text,
        "vocab_size": vocab_size,
        "projection_dim": _WIDTH,
        "pad_token_id": tokenizer.pad_token_id,
    }


def make_xvla_checkpoint(out: Path, benchmark: BenchmarkConfig, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init X-VLA for `benchmark`'s features into `out`, the way lerobot-train does.

    The tokenizer it refers to goes to `tokenizer_dir(out)`. Actions come in chunks of 8, of
    which 4 are executed, after 4 denoising steps; `overrides` replace any `XVLAConfig` field.
    The weights depend only on `seed`.

    `action_mode="auto"` makes the model's action space the benchmark's action size (padded to
    `max_action_dim`=20 inside the model, trimmed back on output); X-VLA's default `ee6d` is a
    fixed 20-dimensional end-effector layout whatever the env. X-VLA's default normalisation is
    IDENTITY for every feature, so the stats saved with the pipelines are not applied and the
    actions come out as the network makes them (about N(0, 1) here); pass
    `normalization_mapping` to change that.

    Florence-2 creates its image projection with `torch.empty` and no initialiser (pretrained
    weights overwrite it), so a random-init X-VLA holds whatever memory it got: values up to
    1e8 or NaN, different on every run. It is drawn here from the seeded RNG instead.
    """
    inputs, outputs = policy_features(benchmark)
    return _build(out, inputs, outputs, seed, {"action_mode": "auto", **overrides})


def make_xvla_libero_checkpoint(out: Path, benchmark: BenchmarkConfig, *, published: bool, seed: int = 0) -> Path:
    """A tiny X-VLA for LIBERO as its env processors feed it: `benchmark`'s cameras, the 20-d
    state X-VLA's LIBERO step builds, the 20-d `ee6d` action its post-processor turns into
    LIBERO's 7 (images resized with padding to 96x96 inside the model, to keep it small).

    `published=True` saves its pre-processor without the steps X-VLA's LIBERO env
    pre-processor also applies (`xvla_image_to_float`, `xvla_imagenet_normalize`,
    `xvla_add_domain_id`), as the hub's lerobot/xvla-libero has it (LeRobot issue #2954):
    lerobot-eval 0.4.4 runs only that layout. `published=False` keeps what
    `make_pre_post_processors` writes (lerobot-eval normalises twice and fails). Both hold the
    same weights for the same `seed`.
    """
    import json

    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs, _ = policy_features(benchmark)
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(20,))
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(20,))}
    _build(out, inputs, outputs, seed, {"action_mode": "ee6d", "resize_imgs_with_padding": (96, 96)})
    if published:
        path = out / "policy_preprocessor.json"
        pipeline = json.loads(path.read_text())
        dropped = {"xvla_image_to_float", "xvla_imagenet_normalize", "xvla_add_domain_id"}
        pipeline["steps"] = [s for s in pipeline["steps"] if s.get("registry_name") not in dropped]
        path.write_text(json.dumps(pipeline, indent=4))
    return out


def _build(out: Path, inputs: dict[str, Any], outputs: dict[str, Any], seed: int, overrides: dict[str, Any]) -> Path:
    from lerobot.policies.factory import get_policy_class, make_policy_config

    tok_path = tokenizer_dir(out).resolve()
    tokenizer = make_byte_tokenizer(tok_path)
    small: dict[str, Any] = {
        "device": "cpu",
        "florence_config": tiny_florence_config(tokenizer),
        "tokenizer_name": str(tok_path),
        "hidden_size": _WIDTH,
        "depth": 1,
        "num_heads": 2,
        "len_soft_prompts": 4,
        "chunk_size": 8,
        "n_action_steps": 4,
        "num_denoising_steps": 4,
    }
    small.update(overrides)
    cfg = make_policy_config("xvla", input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    policy = get_policy_class("xvla")(cfg)
    vlm = policy.model.vlm  # the projector is a bare parameter in 0.4.4, a Linear (its weight) in 0.6
    projection = getattr(vlm, "image_projection", None)
    if projection is None:
        projection = vlm.multi_modal_projector.image_projection.weight
    torch.nn.init.normal_(projection, std=0.02)
    return save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))
