"""A tiny random-init pi0 / pi05 checkpoint, built without the Hugging Face hub.

LeRobot 0.4.4's pi0 and pi05 need openpi's patched transformers 4.53 (they import
`transformers.models.siglip.check`), which the main venv cannot have: its other VLAs need
transformers >= 4.57. Every process that builds or loads these policies therefore runs with an
overlay directory first on PYTHONPATH that holds only the patched `transformers` and a
`tokenizers` it accepts (transformers checks that version at import), installed with `pip install --target`:

    .venv/bin/pip install --target OVERLAY --no-deps transformers-openpi==4.53.3 tokenizers==0.21.4

LeRobot 0.6's pi0/pi05 run on stock transformers 5 (its `pi_gemma.py` subclasses transformers'
PaliGemma and Gemma instead): no overlay there (`test_lerobot_vla.PI0_FIRST` is empty).

Two things are hard-coded in LeRobot and are worked around here:

* Architecture. pi0/pi05 take their sizes from `paligemma_variant` / `action_expert_variant`,
  which must be "gemma_2b" or "gemma_300m" (PaliGemma 3B + a 300M expert, ~16 GB), and build
  SigLIP-So400m and a 257k vocabulary unconditionally. Nothing in the config can shrink them, so
  `tiny_pi0()` / `install_tiny_pi0_patch()` replace, in `modeling_pi0` and `modeling_pi05`, the
  variant lookup and the two transformers constructors they call. The saved config still says
  "gemma_2b", so **loading the checkpoint needs the same patch**: in this process wrap the load in
  `with tiny_pi0():`; in another process (lerobot-eval, rollbench workers) put the directory from
  `write_pi0_sitecustomize(dir)` on PYTHONPATH. Without it, `from_pretrained` builds the full
  ~3B-parameter model and then fails on the state dict.
* Tokenizer. The processors load "google/paligemma-3b-pt-224". The builder saves a tiny byte-level
  tokenizer beside the checkpoint (`tokenizer_dir(out)`) and stores its absolute path in
  `policy_preprocessor.json`, so lerobot-eval loads the checkpoint without overrides; the
  directory must stay where it is.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollbench.config.env import BenchmarkConfig

# Sizes of the tiny model. Both Gemmas keep 8 query heads of the same head_dim: the layer
# function shared by the two (`compute_layer_complete`) concatenates their keys and reshapes the
# attention output to `8 * head_dim`. Depths must match: it walks both models' layers together.
_VLM = {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 8}
_EXPERT = {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 8, "num_kv_heads": 1, "head_dim": 8}
_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
_VOCAB = 512  # the byte tokenizer's ids (< 260) must fit; LeRobot hard-codes 257152
_IMAGE_SIZE = 56  # PI0Config.image_resolution: SigLIP's 14-pixel patches give 16 image tokens
_PAD, _BOS, _EOS = "<pad>", "<bos>", "<eos>"
_HUB_TOKENIZER = "google/paligemma-3b-pt-224"
#: pi0_fast builds the same PaliGemma by the same variant names, without the action expert
_MODULES = (
    "lerobot.policies.pi0.modeling_pi0", "lerobot.policies.pi05.modeling_pi05", "lerobot.policies.pi0_fast.modeling_pi0_fast",
)


def tokenizer_dir(out: Path) -> Path:
    """Where `make_pi0_checkpoint(out, ...)` puts the tokenizer that `out` refers to."""
    return out.with_name(out.name + "-paligemma-tokenizer")


def _tiny_replacements(module: ModuleType) -> dict[str, Any]:
    """The attributes of `module` (modeling_pi0, modeling_pi05, modeling_pi0_fast) that make its model tiny.

    `get_gemma_config` maps the two allowed variant names to tiny Gemmas. The constructors are
    wrapped because `PaliGemmaWithExpertModel.__init__` sets SigLIP's size, the projector width
    and the vocabulary on the transformers configs right before building the models.
    """
    gemma_config = module.GemmaConfig
    paligemma_name, gemma_name = _constructor_names(module)
    paligemma = getattr(module, paligemma_name)

    def get_gemma_config(variant: str) -> Any:
        sizes = {"gemma_2b": _VLM, "gemma_300m": _EXPERT}.get(variant)
        if sizes is None:
            raise ValueError(f"Unknown variant: {variant}")
        return gemma_config(**sizes)

    def tiny_paligemma(config: Any) -> Any:
        for key, value in _VISION.items():
            setattr(config.vision_config, key, value)
        # The projector maps SigLIP's width onto the language model's.
        config.vision_config.projection_dim = config.text_config.hidden_size
        config.text_config.vocab_size = _VOCAB
        config._vocab_size = _VOCAB  # PaliGemmaConfig's own copy, which LeRobot sets too
        return paligemma(config=config)

    replacements = {"get_gemma_config": get_gemma_config, paligemma_name: tiny_paligemma}
    if gemma_name is not None:
        gemma = getattr(module, gemma_name)

        def tiny_gemma(config: Any) -> Any:
            config.vocab_size = _VOCAB
            return gemma(config=config)

        replacements[gemma_name] = tiny_gemma
    return replacements


def _constructor_names(module: ModuleType) -> tuple[str, str | None]:
    """The PaliGemma and Gemma classes `PaliGemmaWithExpertModel` builds: transformers' own in
    LeRobot 0.4.4 (openpi's patched transformers), LeRobot 0.6's subclasses of them (`pi_gemma.py`);
    pi0_fast has no action expert (no Gemma)."""
    if hasattr(module, "PaliGemmaForConditionalGenerationWithPiGemma"):
        paligemma, gemma = "PaliGemmaForConditionalGenerationWithPiGemma", "PiGemmaForCausalLM"
    else:
        paligemma, gemma = "PaliGemmaForConditionalGeneration", "GemmaForCausalLM"
    return paligemma, gemma if hasattr(module, gemma) else None


def _patch(module: ModuleType) -> dict[str, Any]:
    """Make `module` build tiny models; returns the replaced attributes (idempotent)."""
    if getattr(module, "_rollbench_tiny_pi0", False):
        return {}
    names = ("get_gemma_config", *(name for name in _constructor_names(module) if name))
    saved = {name: getattr(module, name) for name in names}
    for name, value in _tiny_replacements(module).items():
        setattr(module, name, value)
    module._rollbench_tiny_pi0 = True
    return saved


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches modeling_pi0/modeling_pi05/modeling_pi0_fast right after they are first imported.

    A sitecustomize runs in every Python process on the PYTHONPATH; importing LeRobot's pi0
    (torch, transformers) there would cost seconds in processes that never use it.
    """

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install_tiny_pi0_patch() -> None:
    """Make every pi0/pi05/pi0_fast this process builds or loads the tiny one, for good (for a sitecustomize)."""
    for name in _MODULES:
        if name in sys.modules:
            _patch(sys.modules[name])
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def write_pi0_sitecustomize(hook: Path) -> Path:
    """Write `hook/sitecustomize.py`, which installs the tiny-pi0 patch; returns `hook`.

    Put `hook` on PYTHONPATH after the overlay and before the tests directory (which it imports
    this module from): `OVERLAY:hook:tests`. It shadows any other sitecustomize.
    """
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text("import vla_pi0\n\nvla_pi0.install_tiny_pi0_patch()\n")
    return hook


@contextlib.contextmanager
def tiny_pi0() -> Iterator[None]:
    """Within the block, pi0/pi05/pi0_fast models built or loaded in this process are the tiny ones."""
    import importlib

    modules = [importlib.import_module(name) for name in _MODULES]
    saved = [(module, _patch(module)) for module in modules]
    try:
        yield
    finally:
        for module, attrs in saved:
            if attrs:
                for name, value in attrs.items():
                    setattr(module, name, value)
                module._rollbench_tiny_pi0 = False


def make_tiny_paligemma_tokenizer(path: Path) -> Path:
    """Save a byte-level tokenizer (no merges: every byte is a token, any task string encodes) into `path`.

    Like PaliGemma's, it prepends <bos>; pi0 pads its prompt to a fixed length, so it needs <pad>.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for token in (_PAD, _BOS, _EOS):
        vocab[token] = len(vocab)
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.post_processor = processors.TemplateProcessing(single=f"{_BOS} $A", special_tokens=[(_BOS, vocab[_BOS])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token=_PAD, bos_token=_BOS, eos_token=_EOS)
    assert len(tokenizer) <= _VOCAB
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    return path


@contextlib.contextmanager
def _hub_tokenizer_from(local: Path) -> Iterator[None]:
    """LeRobot's pi0/pi05 processor factories load the PaliGemma tokenizer by its hub name: load `local` instead."""
    import lerobot.processor.tokenizer_processor as tp

    auto = tp.AutoTokenizer

    class _Local:
        @staticmethod
        def from_pretrained(name: str, *args: Any, **kwargs: Any) -> Any:
            return auto.from_pretrained(str(local) if name == _HUB_TOKENIZER else name, *args, **kwargs)

    tp.AutoTokenizer = _Local
    try:
        yield
    finally:
        tp.AutoTokenizer = auto


def make_pi0_checkpoint(
    out: Path, benchmark: BenchmarkConfig, policy_type: str = "pi0", seed: int = 0, **overrides: Any
) -> Path:
    """Save a tiny random-init pi0 or pi05 for `benchmark`'s features into `out`, the way lerobot-train does.

    Needs the overlay first on sys.path. The tokenizer goes to `tokenizer_dir(out)`. Actions come
    in chunks of 8, of which 4 are executed, after 4 denoising steps; `overrides` replace any
    `PI0Config`/`PI05Config` field. Loading it needs the tiny patch (see the module docstring).
    """
    import torch
    from lerobot.configs.types import FeatureType
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    from lerobot_helpers import dataset_stats, policy_features

    if policy_type not in ("pi0", "pi05"):
        raise ValueError(f"not a pi0 policy type: {policy_type}")
    inputs, outputs = policy_features(benchmark)
    tokenizer = make_tiny_paligemma_tokenizer(tokenizer_dir(out)).resolve()
    small: dict[str, Any] = {
        "device": "cpu",
        "image_resolution": (_IMAGE_SIZE, _IMAGE_SIZE),
        "chunk_size": 8,
        "n_action_steps": 4,
        "num_inference_steps": 4,
    }
    small.update(overrides)
    cfg = make_policy_config(policy_type, input_features=inputs, output_features=outputs, **small)
    stats = dataset_stats(inputs, outputs, 256.0, 100.0)
    for key, ft in {**inputs, **outputs}.items():
        if ft.type is not FeatureType.VISUAL:  # pi05 normalises state and action by quantiles
            mean, std = stats[key]["mean"], stats[key]["std"]
            stats[key] |= {"q01": mean - 2.326 * std, "q99": mean + 2.326 * std}
    with tiny_pi0():
        torch.manual_seed(seed)
        policy = get_policy_class(policy_type)(cfg)
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    with _hub_tokenizer_from(tokenizer):
        pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    for step in pre.steps:
        if getattr(step, "tokenizer_name", None) == _HUB_TOKENIZER:
            step.tokenizer_name = str(tokenizer)  # saved in policy_preprocessor.json, loaded from there
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out
