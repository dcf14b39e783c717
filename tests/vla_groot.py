"""A tiny random-init GR00T N1.5 checkpoint (LeRobot 0.4.4's `groot` policy), built without the Hugging Face hub.

With LeRobot 0.6, whose `groot` is GR00T N1.7, `make_groot_checkpoint` builds a tiny N1.7 instead
(tests/vla_groot17.py) and `lerobot_home` does nothing: the tests run the same on both lines.

LeRobot 0.4.4's GR00T is not built from its own config alone: `GrootPolicy` always loads a saved
`GR00TN15` from `base_model_path` (also when it loads a fine-tuned checkpoint, whose weights then
replace the base's), and that model's Eagle backbone and the preprocessor read their config,
Python code and tokenizer from `$HF_LEROBOT_HOME/lerobot/eagle2hg-processor-groot-n1p5` (the
`tokenizer_assets_repo`), downloading whatever is missing there. So three things are written:

- the Eagle assets under `home` (`eagle_assets_dir(home)`): a tiny Eagle 2.5 config (Qwen3 text
  model, SigLIP vision model), a byte-level tokenizer, a chat template and the processor configs;
- a tiny `GR00TN15` beside the checkpoint (`base_model_dir(out)`), which the checkpoint names by
  its absolute path, so it must stay there;
- the checkpoint itself, as `lerobot-train` leaves it in `pretrained_model/`.

Every process that loads the checkpoint (lerobot-eval, rollbench, a test's subprocess) must run
with `HF_LEROBOT_HOME=<home>` in its environment, and should have `HF_HUB_OFFLINE=1`: LeRobot reads
`HF_LEROBOT_HOME` once, when `lerobot.utils.constants` is imported, and a wrong home makes it fetch
the real assets from the hub. Building needs no such variable: `make_groot_checkpoint` points the
already-imported LeRobot modules at `home` while it runs.

transformers imports the Eagle code (`trust_remote_code`) through its module cache,
`$HF_HOME/modules/transformers_modules/eagle2hg_hyphen_processor_hyphen_groot_hyphen_n1p5`, which
is the same for every `home`; the files written there are the same for every build.

Needs the `peft` package: the vendored Eagle model imports it.
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
from vla_helpers import byte_level_bpe

# LeRobot's default `tokenizer_assets_repo`; the assets go to `home / _ASSETS_REPO`.
_ASSETS_REPO = "lerobot/eagle2hg-processor-groot-n1p5"
# SigLIP sees one 32x32 tile per camera in 8x8 patches; Eagle's pixel shuffle (ratio 0.5) turns
# the 4x4 patches into 2x2 = 4 image tokens, the processor's `tokens_per_tile`.
_IMAGE_SIZE = 32
_PATCH_SIZE = 8
_TOKENS_PER_TILE = (_IMAGE_SIZE // _PATCH_SIZE) ** 2 // 4
# `EagleBackbone` projects the language model's features with a hard-coded `nn.Linear(2048, ...)`,
# so the (one-layer, two-head) Qwen3 must be 2048 wide, as the real Qwen3-1.7B is.
_LLM_HIDDEN = 2048
# Width of everything after that projection: the action head, its DiT and the VL self-attention.
_WIDTH = 32
# The real action horizon: LeRobot's preprocessor pads action chunks to min(chunk_size, 16).
_ACTION_HORIZON = 16
# Eagle's processor defaults for the image tokens, plus a Qwen-style chat's markers and padding.
_IMAGE_TOKENS = ("<IMG_CONTEXT>", "<img>", "</img>")
_PAD, _IM_START, _IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# What the real assets' template renders: `<image-N>` for the N-th image (the processor replaces
# it by `<img>` + tokens_per_tile * `<IMG_CONTEXT>` + `</img>`), then the text, in a Qwen chat.
_CHAT_TEMPLATE = (
    "{%- set ns = namespace(images=0) -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{%- set ns.images = ns.images + 1 -%}{{ '<image-' ~ ns.images ~ '>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)
# Eagle's vendored model forces `flash_attention_2` on its SigLIP tower, which transformers refuses
# to build without the flash_attn package (and which cannot run on a CPU). This subclass, named by
# the assets' `auto_map`, builds the same tower with `sdpa` and hands it in: the weights' names and
# everything else are the vendored model's. It lives in its own file because LeRobot copies the
# vendored files over the assets directory each time it builds the backbone.
_CPU_EAGLE_MODULE = "modeling_eagle2_5_vl_sdpa"
_CPU_EAGLE_SOURCE = '''"""Eagle 2.5 VL with SigLIP on `sdpa` attention (written by rollbench's tests/vla_groot.py)."""

from transformers.models.siglip.modeling_siglip import SiglipVisionModel

from .modeling_eagle2_5_vl import Eagle25VLForConditionalGeneration


class Eagle25VLForConditionalGenerationSdpa(Eagle25VLForConditionalGeneration):
    def __init__(self, config, vision_model=None, language_model=None):
        if vision_model is None:
            config.vision_config._attn_implementation = "sdpa"
            vision_model = SiglipVisionModel(config.vision_config)
        super().__init__(config, vision_model=vision_model, language_model=language_model)
'''


def eagle_assets_dir(home: Path) -> Path:
    """Where LeRobot looks for the Eagle assets when `HF_LEROBOT_HOME` is `home`."""
    return home / _ASSETS_REPO


def base_model_dir(out: Path) -> Path:
    """Where `make_groot_checkpoint(out, ...)` puts the `GR00TN15` that `out` names as `base_model_path`."""
    return out.with_name(out.name + "-gr00t")


@contextmanager
def lerobot_home(home: Path) -> Iterator[None]:
    """Point the already-imported GR00T modules at `home` while it lasts (a build, an in-process run).

    They copied `HF_LEROBOT_HOME` from `lerobot.utils.constants` at import, so setting the
    environment variable now would not reach them.
    """
    if not installed_is_n15():  # N1.7 reads nothing from HF_LEROBOT_HOME
        yield
        return
    from lerobot.policies.groot import groot_n1, processor_groot

    with mock.patch.object(groot_n1, "HF_LEROBOT_HOME", home), mock.patch.object(
        processor_groot, "HF_LEROBOT_HOME", home
    ):
        yield


def _byte_tokenizer() -> Any:
    """The byte-level BPE (vla_helpers.byte_level_bpe) with Eagle's special tokens."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=byte_level_bpe(),
        pad_token=_PAD,
        bos_token=_IM_START,
        eos_token=_IM_END,
        additional_special_tokens=list(_IMAGE_TOKENS),
        # Eagle's forward takes no `token_type_ids`, which a plain fast tokenizer returns by default.
        model_input_names=["input_ids", "attention_mask"],
    )


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def make_eagle_assets(home: Path) -> Path:
    """Write the tiny Eagle assets LeRobot reads from `eagle_assets_dir(home)`, and return that directory.

    Besides what `AutoConfig`, `AutoModel` and `AutoProcessor` read (with `trust_remote_code`:
    each config's `auto_map` names the vendored classes that LeRobot copies in beside them), it
    holds every file of LeRobot's list of required assets (`vocab.json`, `merges.txt`, ...), so that
    LeRobot finds nothing to download. The files do not depend on a seed.
    """
    from transformers import GenerationConfig

    path = eagle_assets_dir(home)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _byte_tokenizer()
    tokenizer.save_pretrained(path)
    tokenizer.backend_tokenizer.model.save(str(path))  # vocab.json and merges.txt (empty)
    added = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in (_PAD, _IM_START, _IM_END, *_IMAGE_TOKENS)}
    _write_json(path / "added_tokens.json", added)
    _write_json(path / "chat_template.json", {"chat_template": _CHAT_TEMPLATE})
    (path / f"{_CPU_EAGLE_MODULE}.py").write_text(_CPU_EAGLE_SOURCE)

    ids = {"pad_token_id": added[_PAD], "bos_token_id": added[_IM_START], "eos_token_id": added[_IM_END]}
    text = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": len(tokenizer),
        "hidden_size": _LLM_HIDDEN, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
        "tie_word_embeddings": False, **ids,
    }
    vision = {
        "model_type": "siglip_vision_model", "hidden_size": _WIDTH, "intermediate_size": 2 * _WIDTH,
        "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": _IMAGE_SIZE, "patch_size": _PATCH_SIZE,
    }
    _write_json(path / "config.json", {
        "architectures": ["Eagle25VLForConditionalGeneration"],
        "auto_map": {
            "AutoConfig": "configuration_eagle2_5_vl.Eagle25VLConfig",
            "AutoModel": f"{_CPU_EAGLE_MODULE}.Eagle25VLForConditionalGenerationSdpa",
        },
        "model_type": "eagle_2_5_vl",
        "text_config": text,
        "vision_config": vision,
        # The vendored config defaults to flash_attention_2 (refused on a CPU without flash_attn).
        "_attn_implementation": "sdpa",
        "select_layer": -1,
        "force_image_size": _IMAGE_SIZE,
        "downsample_ratio": 0.5,
        "use_pixel_shuffle": True,
        "mlp_connector_layers": 1,
        "dynamic_image_size": True,
        "use_thumbnail": False,
        "min_dynamic_tiles": 1,
        "max_dynamic_tiles": 1,
        "image_token_index": added[_IMAGE_TOKENS[0]],
        **ids,
    })
    GenerationConfig(**ids).save_pretrained(path)
    processor_map = {"AutoProcessor": "processing_eagle2_5_vl.Eagle25VLProcessor"}
    _write_json(path / "preprocessor_config.json", {
        "auto_map": {
            **processor_map,
            "AutoImageProcessor": "image_processing_eagle2_5_vl_fast.Eagle25VLImageProcessorFast",
        },
        "processor_class": "Eagle25VLProcessor",
        "size": {"height": _IMAGE_SIZE, "width": _IMAGE_SIZE},
        "min_dynamic_tiles": 1,
        "max_dynamic_tiles": 1,
        "use_thumbnail": False,
        "do_pad": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    })
    _write_json(path / "processor_config.json", {
        "auto_map": processor_map,
        "processor_class": "Eagle25VLProcessor",
        "tokens_per_tile": _TOKENS_PER_TILE,
        "image_token": _IMAGE_TOKENS[0],
        "video_token": _IMAGE_TOKENS[0],
        "image_start_token": _IMAGE_TOKENS[1],
        "image_end_token": _IMAGE_TOKENS[2],
    })
    return path


def make_tiny_gr00t(path: Path, home: Path, seed: int, max_state_dim: int, max_action_dim: int) -> Path:
    """Save a tiny random-init `GR00TN15` (seeded by `seed`) into `path`, for `base_model_path`.

    Backbone: the assets' Eagle (one Qwen3 layer, `select_layer=1`) projected to 32 features.
    Action head: flow matching over 16 steps of `max_action_dim`, 4 denoising steps, a two-layer
    DiT and a one-layer VL self-attention, all 32 wide; 32 embodiments, as LeRobot's
    `new_embodiment` tag is embodiment 31. The state and action widths must be the policy
    config's `max_state_dim` and `max_action_dim`: the preprocessor pads to those.
    """
    from lerobot.policies.groot.groot_n1 import GR00TN15, GR00TN15Config

    attention = {"num_attention_heads": 2, "attention_head_dim": _WIDTH // 2, "positional_embeddings": None}
    action_head = {
        "action_dim": max_action_dim, "action_horizon": _ACTION_HORIZON, "max_state_dim": max_state_dim,
        "add_pos_embed": True, "max_seq_len": 1024, "model_dtype": "float32",
        "input_embedding_dim": _WIDTH, "backbone_embedding_dim": _WIDTH, "hidden_size": _WIDTH,
        "max_num_embodiments": 32, "num_target_vision_tokens": 4, "num_inference_timesteps": 4,
        "num_timestep_buckets": 1000, "noise_beta_alpha": 1.5, "noise_beta_beta": 1.0, "noise_s": 0.999,
        "tune_projector": True, "tune_diffusion_model": True, "use_vlln": True,
        "diffusion_model_cfg": {
            **attention, "num_layers": 2, "output_dim": _WIDTH, "cross_attention_dim": _WIDTH,
            "interleave_self_attention": True, "norm_type": "ada_norm", "dropout": 0.2, "final_dropout": True,
        },
        "vl_self_attention_cfg": {**attention, "num_layers": 1, "dropout": 0.2, "final_dropout": True},
    }
    backbone = {
        "tune_llm": False, "tune_visual": False, "select_layer": 1, "reproject_vision": False,
        "tokenizer_assets_repo": _ASSETS_REPO, "project_to_dim": _WIDTH,
    }
    config = GR00TN15Config(
        backbone_cfg=backbone, action_head_cfg=action_head, action_horizon=_ACTION_HORIZON,
        action_dim=max_action_dim, compute_dtype="float32",
    )
    torch.manual_seed(seed)
    with lerobot_home(home):
        model = GR00TN15(config, local_model_path=str(path))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    return path


def installed_is_n15() -> bool:
    """Whether the installed LeRobot's `groot` is GR00T N1.5 (0.4.4); 0.6's is N1.7 (tests/vla_groot17.py)."""
    import importlib.util

    return importlib.util.find_spec("lerobot.policies.groot.groot_n1") is not None


def make_groot_checkpoint(out: Path, benchmark: BenchmarkConfig, home: Path, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init GR00T for `benchmark`'s features into `out`, the way lerobot-train does.

    Writes the Eagle assets under `home` and the base model to `base_model_dir(out)` (see the
    module's docstring: loading `out` needs both, and `HF_LEROBOT_HOME=<home>`). The same `seed`
    gives the same weights. Chunks are 16 steps, of which the last `n_action_steps` (8) are
    executed; `use_bf16=False` keeps the model in float32 on a CPU; `overrides` replace any
    `GrootConfig` field (`max_state_dim` and `max_action_dim` also size the base model).
    """
    if not installed_is_n15():  # LeRobot 0.6: the installed `groot` is N1.7
        from vla_groot17 import make_groot17_checkpoint

        return make_groot17_checkpoint(out, benchmark, home, seed, **overrides)
    from lerobot.policies.factory import get_policy_class, make_policy_config

    inputs, outputs = policy_features(benchmark)
    make_eagle_assets(home)
    small: dict[str, Any] = {
        "device": "cpu",
        "use_bf16": False,
        "chunk_size": _ACTION_HORIZON,
        "n_action_steps": 8,
        "max_state_dim": 8,
        "max_action_dim": 8,
    }
    small.update(overrides)
    base = make_tiny_gr00t(
        base_model_dir(out).resolve(), home, seed, small["max_state_dim"], small["max_action_dim"]
    )
    small.setdefault("base_model_path", str(base))
    cfg = make_policy_config("groot", input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    with lerobot_home(home):
        policy = get_policy_class("groot")(cfg)
    return save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))
