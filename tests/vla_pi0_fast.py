"""A tiny random-init pi0-FAST checkpoint (LeRobot policy type "pi0_fast"), built without the hub.

pi0-FAST is pi0's PaliGemma decoding action tokens one at a time (greedy at its default
temperature 0). Three things it loads by name are replaced by local directories beside the
checkpoint, whose absolute paths its config and `policy_preprocessor.json` store (so they must
stay there):

* The PaliGemma 3B, hard-coded by variant name as in pi0: the same patch shrinks it
  (`vla_pi0.tiny_pi0()` in this process, `TINY_PI0=1` and the recording sitecustomize in another).
* `text_tokenizer_name` (`google/paligemma-3b-pt-224`): a byte-level tokenizer padded with
  unused tokens to the tiny model's whole vocabulary (`vla_pi0._VOCAB`), so that every token
  the model can emit maps to an action token (pi0-FAST reads action token `vocab_size - 1 -
  fast_skip_tokens - id`).
* `action_tokenizer_name` (`lerobot/fast-action-tokenizer`, loaded with `AutoProcessor` and
  `trust_remote_code=True`: its code lives in that repository). `make_fast_tokenizer` writes a
  stand-in processor module of its own: the DCT of each action chunk, scaled and rounded, one
  character per coefficient, a character-level BPE over as many characters as the vocabulary.
  pi0-FAST's decoding (inverse DCT of the characters' code points) reads its `bpe_tokenizer`,
  `min_token` and `scale`, as it does FAST's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.config.env import BenchmarkConfig
from vla_pi0 import _BOS, _EOS, _PAD, _VOCAB, tiny_pi0

_MIN_TOKEN = -_VOCAB // 2  # the characters' code points 0.._VOCAB-1 are DCT coefficients -256..255
_SCALE = 100.0

_PROCESSOR = '''"""A FAST-style action tokenizer for rollbench's tests (written by tests/vla_pi0_fast.py)."""

import json
from pathlib import Path

import numpy as np
from scipy.fft import dct
from transformers import PreTrainedTokenizerFast


class TinyFastProcessor:
    """Action chunks (rows, steps, dims) to token ids: each chunk's DCT over time, times `scale`,
    rounded, shifted by `min_token`, one character per coefficient, through `bpe_tokenizer`."""

    def __init__(self, bpe_tokenizer, scale, min_token):
        self.bpe_tokenizer, self.scale, self.min_token = bpe_tokenizer, scale, min_token

    @classmethod
    def register_for_auto_class(cls, auto_class="AutoProcessor"):
        """AutoProcessor calls this on a class it loads from a repository's code: nothing to register."""

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        config = json.loads((Path(path) / "processor_config.json").read_text())
        return cls(PreTrainedTokenizerFast.from_pretrained(path), config["scale"], config["min_token"])

    def __call__(self, actions):
        out = []
        for chunk in np.asarray(actions, dtype=np.float64):
            coeffs = np.around(dct(chunk, axis=0, norm="ortho") * self.scale).astype(int).flatten()
            text = "".join(map(chr, np.clip(coeffs - self.min_token, 0, len(self.bpe_tokenizer) - 1)))
            out.append(self.bpe_tokenizer(text, add_special_tokens=False)["input_ids"])
        return out
'''


def tokenizer_dir(out: Path) -> Path:
    """Where `make_pi0_fast_checkpoint(out, ...)` puts the PaliGemma tokenizer that `out` refers to."""
    return out.with_name(out.name + "-paligemma-tokenizer")


def fast_dir(out: Path) -> Path:
    """Where `make_pi0_fast_checkpoint(out, ...)` puts the action tokenizer that `out` refers to."""
    return out.with_name(out.name + "-fast-tokenizer")


def make_paligemma_tokenizer(path: Path) -> Path:
    """The byte-level tokenizer of `vla_pi0` (<bos> first, <pad>), filled with unused tokens to `_VOCAB`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for token in (_PAD, _BOS, _EOS):
        vocab[token] = len(vocab)
    for i in range(_VOCAB - len(vocab)):
        vocab[f"<unused{i}>"] = len(vocab)
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.post_processor = processors.TemplateProcessing(single=f"{_BOS} $A", special_tokens=[(_BOS, vocab[_BOS])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token=_PAD, bos_token=_BOS, eos_token=_EOS)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    return path


def make_fast_tokenizer(path: Path) -> Path:
    """Write the stand-in FAST processor into `path`: its module, `processor_config.json` naming
    it for `AutoProcessor` (`auto_map`), and its character-level BPE over `_VOCAB` characters."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(vocab={chr(i): i for i in range(_VOCAB)}, merges=[]))
    raw.decoder = decoders.Fuse()
    path.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=raw).save_pretrained(path)
    (path / "processing_tiny_fast.py").write_text(_PROCESSOR)
    config = {"auto_map": {"AutoProcessor": "processing_tiny_fast.TinyFastProcessor"},
              "processor_class": "TinyFastProcessor", "scale": _SCALE, "min_token": _MIN_TOKEN}
    (path / "processor_config.json").write_text(json.dumps(config, indent=2))
    return path


def make_pi0_fast_checkpoint(out: Path, benchmark: BenchmarkConfig, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random-init pi0-FAST for `benchmark`'s features into `out`, the way lerobot-train does.

    Its tokenizers go beside it (`tokenizer_dir(out)`, `fast_dir(out)`). Chunks of 4 actions, all
    executed, decoded from at most 12 tokens; images at pi0-FAST's 224x224 (its SigLIP is built
    at 224 whatever `image_resolution` says, unlike pi0's); the state padded to 4 (its prompt spells each
    value out); `validate_action_token_prefix` off (a random model does not start with
    "Action:"); the language model's matrices drawn with std 1 (below); `overrides` replace any
    `PI0FastConfig` field. Loading it needs the tiny patch
    (`vla_pi0`).
    """
    from lerobot.policies.factory import get_policy_class, make_policy_config

    inputs, outputs = policy_features(benchmark)
    text = make_paligemma_tokenizer(tokenizer_dir(out)).resolve()
    fast = make_fast_tokenizer(fast_dir(out)).resolve()
    small: dict[str, Any] = {
        "device": "cpu",
        "text_tokenizer_name": str(text),
        "action_tokenizer_name": str(fast),
        "chunk_size": 4,
        "n_action_steps": 4,
        "max_state_dim": 4,
        "tokenizer_max_length": 48,
        "max_action_tokens": 12,
        "max_decoding_steps": 12,
        "fast_skip_tokens": 0,
        "validate_action_token_prefix": False,
    }
    small.update(overrides)
    cfg = make_policy_config("pi0_fast", input_features=inputs, output_features=outputs, **small)
    with tiny_pi0():
        torch.manual_seed(seed)
        policy = get_policy_class("pi0_fast")(cfg)
        # At Gemma's own init (std 0.02) the tiny model decodes the same tokens whatever it sees
        # (every PushT episode got the same actions); drawn with std 1, the tokens depend on the
        # image and the state
        with torch.no_grad():
            for name, param in policy.named_parameters():
                if param.dim() == 2 and "language_model" in name:
                    param.normal_(0.0, 1.0)
    save_like_lerobot_train(policy, cfg, out, dataset_stats(inputs, outputs, 256.0, 100.0))
    # LeRobot 0.6.1's action tokenizer step saves its action tokenizer's name but not its
    # `paligemma_tokenizer_name`, so a loaded pipeline would ask the hub for PaliGemma's
    path = out / "policy_preprocessor.json"
    pipeline = json.loads(path.read_text())
    for step in pipeline["steps"]:
        if step.get("registry_name") == "action_tokenizer_processor":
            step["config"]["paligemma_tokenizer_name"] = str(text)
    path.write_text(json.dumps(pipeline, indent=4))
    return out
