"""A tiny random-init SmolVLA checkpoint, built without the Hugging Face hub.

SmolVLA names its vision-language backbone by `vlm_model_name`, a hub repo it reads at
construction (`AutoConfig`, `AutoProcessor`) and again in its preprocessor (`AutoTokenizer`).
Pointing it at a local directory with a tiny `SmolVLMConfig` and processor keeps the tests
offline and small; `load_vlm_weights=False` makes SmolVLA build the backbone from that config
instead of downloading weights. The checkpoint stores the directory's absolute path, so the
directory is written beside the checkpoint and must stay there.

Needs the `num2words` package: transformers' SmolVLM processor imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.config.env import BenchmarkConfig

_IMAGE_SIZE = 64
_PATCH_SIZE = 16
# SmolVLA reads `tokenizer.fake_image_token_id` and `.global_image_token_id`, and the
# processor looks up `<image>`; a tokenizer exposes such attributes only for tokens declared
# as its `extra_special_tokens`.
_IMAGE_TOKENS = {
    "fake_image_token": "<fake_token_around_image>",
    "global_image_token": "<global-img>",
    "image_token": "<image>",
    "end_of_utterance_token": "<end_of_utterance>",
}
_PAD, _BOS = "<pad>", "<|im_start|>"


def backbone_dir(out: Path) -> Path:
    """Where `make_smolvla_checkpoint(out, ...)` puts the backbone that `out` refers to."""
    return out.with_name(out.name + "-smolvlm")


def byte_level_bpe(leading: Sequence[str] = ()) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` with no merges: every byte is a token, so any task
    string encodes, with a vocabulary of a few hundred ids. `leading` tokens take the first ids
    (BART's `<s>`, `<pad>`, `</s>` for X-VLA). Each VLA's builder wraps it with its special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate([*leading, *sorted(pre_tokenizers.ByteLevel.alphabet())])}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    return raw


def _byte_tokenizer() -> Any:
    """SmolVLM's: the byte-level BPE with the image tokens its processor looks up."""
    from transformers import PreTrainedTokenizerFast

    raw = byte_level_bpe()
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        pad_token=_PAD,
        bos_token=_BOS,
        eos_token=_IMAGE_TOKENS["end_of_utterance_token"],
        extra_special_tokens=_IMAGE_TOKENS,
    )


def make_tiny_smolvlm(path: Path) -> Path:
    """Save a tiny SmolVLM config and processor (no weights) into `path`, for `vlm_model_name`.

    Text model: Llama, hidden 64, 2 layers, 4 heads (2 KV heads); vision: SigLIP, hidden 32,
    1 layer, 64x64 images in 16x16 patches, which the connector's pixel shuffle (scale 2)
    turns into 4 image tokens.
    """
    from transformers import SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    tokenizer = _byte_tokenizer()
    pad_id = tokenizer.pad_token_id
    text = {
        "model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "pad_token_id": pad_id,
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "tie_word_embeddings": False,
    }
    vision = {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "image_size": _IMAGE_SIZE, "patch_size": _PATCH_SIZE,
    }
    scale = 2
    # The config's default token ids are those of the real 49k vocabulary: out of range here.
    config = SmolVLMConfig(
        text_config=text, vision_config=vision, scale_factor=scale, pad_token_id=pad_id,
        image_token_id=tokenizer.convert_tokens_to_ids(_IMAGE_TOKENS["image_token"]),
    )
    size = {"longest_edge": _IMAGE_SIZE}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(size=size, max_image_size=size, do_image_splitting=False),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(size=size, max_image_size=size),
        image_seq_len=(_IMAGE_SIZE // _PATCH_SIZE) ** 2 // scale**2,
    )
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def make_smolvla_checkpoint(out: Path, benchmark: BenchmarkConfig, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init SmolVLA for `benchmark`'s features into `out`, the way lerobot-train does.

    The backbone it refers to goes to `backbone_dir(out)`. Actions come in chunks of 8, of which
    4 are executed, after 4 denoising steps; `overrides` replace any `SmolVLAConfig` field.
    """
    from lerobot.policies.factory import get_policy_class, make_policy_config

    inputs, outputs = policy_features(benchmark)
    vlm = make_tiny_smolvlm(backbone_dir(out)).resolve()
    small: dict[str, Any] = {
        "device": "cpu",
        "vlm_model_name": str(vlm),
        "load_vlm_weights": False,
        "num_vlm_layers": 2,
        # SmolVLA resizes to this before SigLIP; it must be the backbone's image size.
        "resize_imgs_with_padding": (_IMAGE_SIZE, _IMAGE_SIZE),
        "chunk_size": 8,
        "n_action_steps": 4,
        "num_steps": 4,
    }
    small.update(overrides)
    cfg = make_policy_config("smolvla", input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    policy = get_policy_class("smolvla")(cfg)
    return save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))

#: Qwen's chat template (Qwen2.5-VL, Qwen3-VL), reduced to what the VLAs built here send: messages whose
#: content is a string or a list of images and texts; an image renders as
#: `<|vision_start|><|image_pad|><|vision_end|>`, which the processor widens to one pad per image token
QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'video' -%}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)
