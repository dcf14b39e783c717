"""Preflight of a LeRobot checkpoint against a benchmark: does what the env gives fit what
the checkpoint was trained on? (`rollbench check`, and `eval` before any episode.)

    checkpoint: config.json input/output features, normalization_mapping, the normaliser's
                stats (policy_preprocessor_step_*_normalizer_processor.safetensors)
    env:        its observation after its processors and --rename_map, as the policy gets it
                (`rollbench check` resets one env; `eval` uses the benchmark's declared
                features), and its action space

    processors: what the policy's own processing does to them (`processor_rows`): the
                tokenizer and backbone it loads (local, cached, to download, or missing
                offline), the task string it reads, images resized with padding, state and
                action padded to `max_state_dim` / `max_action_dim`, `n_action_steps` within
                `chunk_size` -- what VLAs (SmolVLA, pi0, GR00T, X-VLA) add to ACT's inputs

Every row is `ok`, `soft` (a warning: it runs, but look) or `hard` (the run would give
nonsense or crash: refused), with the fix where one is known.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rollbench import hub
from rollbench.config.env import BenchmarkConfig


@dataclass(frozen=True)
class Row:
    key: str
    wants: str  # what the checkpoint expects
    gets: str  # what the env gives
    status: str  # ok | soft | hard
    fix: str = ""


@dataclass(frozen=True)
class Given:
    """One input as the policy gets it: kind (VISUAL / STATE / ENV), shape (images CHW),
    and, from a real observation, dtype and value range."""

    kind: str
    shape: tuple[int, ...]
    dtype: str = ""
    low: float | None = None
    high: float | None = None

    def text(self) -> str:
        out = f"{self.kind}{list(self.shape)}"
        if self.dtype:
            out += f" {self.dtype}"
        if self.low is not None and self.high is not None:
            out += f" [{self.low:.3g}, {self.high:.3g}]"
        return out


def declared(benchmark: BenchmarkConfig, renames: Mapping[str, str]) -> dict[str, Given]:
    """The benchmark's declared features as the policy sees them (images channel-first)."""
    out = {}
    for key, ft in benchmark.features.items():
        if ft.type == "ACTION":
            continue
        shape = tuple(ft.shape)
        if ft.type == "VISUAL" and len(shape) == 3:
            shape = (shape[2], shape[0], shape[1])
        out[renames.get(key, key)] = Given(ft.type, shape)
    return out


def observed(batch: Mapping[str, Any]) -> dict[str, Given]:
    """Inputs from one real, processed observation batch (a batch of one)."""
    out = {}
    for key, value in batch.items():
        if key == "task":
            continue
        arr = np.asarray(value)
        if arr.dtype == object or arr.ndim < 2:
            continue
        row = arr[0]
        if row.ndim == 3:  # HWC image as the env gives it; the policy sees CHW
            h, w, c = row.shape
            kind, shape = "VISUAL", (c, h, w)
        else:
            kind, shape = ("ENV" if "environment_state" in key else "STATE"), tuple(row.shape)
        finite = row[np.isfinite(row)] if np.issubdtype(row.dtype, np.floating) else row
        low = float(finite.min()) if finite.size else None
        high = float(finite.max()) if finite.size else None
        out[key] = Given(kind, shape, str(arr.dtype), low, high)
    return out


def _steps(ckpt: Path, which: str) -> list[dict[str, Any]]:
    """The steps of the checkpoint's `policy_<which>.json` pipeline (empty when unreadable)."""
    try:
        steps = json.loads((ckpt / f"policy_{which}.json").read_text()).get("steps")
    except (OSError, ValueError, AttributeError):
        return []
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _state_keys(ckpt: Path, steps: list[dict[str, Any]]) -> set[str] | None:
    """Keys of the state files the steps name (their stats); None when none names one."""
    files = [ckpt / str(s["state_file"]) for s in steps if s.get("state_file")]
    files = [f for f in files if f.is_file()]
    if not files:
        return None
    from safetensors import safe_open  # optional: safetensors (comes with lerobot)

    keys: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="numpy") as fh:
            keys.update(fh.keys())
    return keys


def normalisation(ckpt: Path, cfg: Mapping[str, Any]) -> tuple[dict[str, str], set[str] | None]:
    """(feature type -> normalisation mode, keys of the stats the pre-processor holds), read from
    the pipeline that will run rather than from config.json alone: LeRobot's normaliser step
    carries its own `norm_map`; GR00T's packing step normalises state and action min-max
    (`normalize_min_max`) whatever config.json's `normalization_mapping` says."""
    steps = _steps(ckpt, "preprocessor")
    have = _state_keys(ckpt, steps)
    for step in steps:
        config = step.get("config") if isinstance(step.get("config"), dict) else {}
        assert isinstance(config, dict)
        if isinstance(config.get("norm_map"), dict):
            return {str(k): str(v) for k, v in config["norm_map"].items()}, have
        if "normalize_min_max" in config:
            return ({"STATE": "MIN_MAX", "ACTION": "MIN_MAX"} if config["normalize_min_max"] else {}), have
    return dict(cfg.get("normalization_mapping") or {}), have


def _needed_stats(mode: str) -> tuple[str, ...]:
    return {"MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max")}.get(mode, ())


def preflight(ckpt: Path, gives: Mapping[str, Given], action_space: Any, benchmark: BenchmarkConfig,
              options: Mapping[str, str] | None = None) -> list[Row]:
    """Every row of the table; `options` are the --policy.<field> overrides of the run."""
    cfg = json.loads((ckpt / "config.json").read_text())
    inputs: dict[str, dict[str, Any]] = cfg.get("input_features") or {}
    outputs: dict[str, dict[str, Any]] = cfg.get("output_features") or {}
    modes, have = normalisation(ckpt, cfg)
    rows: list[Row] = []
    unused = {k: g for k, g in gives.items() if k not in inputs}
    for key, ft in inputs.items():
        kind, shape = str(ft.get("type")), tuple(ft.get("shape") or ())
        wants = f"{kind}{list(shape)}"
        given = gives.get(key)
        if given is None:
            same = [k for k, g in unused.items() if g.kind == kind and g.shape == shape]
            fix = (f"--rename_map='{{\"{same[0]}\": \"{key}\"}}'" if same else
                   f"the env gives no {kind} input of that shape; it gives: "
                   + ", ".join(f"{k} {g.kind}{list(g.shape)}" for k, g in gives.items()))
            rows.append(Row(key, wants, "(not produced)", "hard", fix))
            continue
        if given.shape != shape:
            rows.append(Row(key, wants, given.text(), "hard", _shape_fix(key, kind, shape, given, benchmark)))
        elif kind == "VISUAL" and given.high is not None and given.dtype.startswith("float") and given.high > 1.5:
            rows.append(Row(key, wants, given.text(), "soft", "float images above 1: LeRobot expects uint8 0..255 "
                                                             "or float 0..1; check the env's image processor"))
        else:
            rows.append(Row(key, wants, given.text(), "ok"))
        rows.extend(_stats_row(key, kind, modes, have))
    for key, given in unused.items():
        rows.append(Row(key, "(not read)", given.text(), "soft", "the checkpoint does not read it; intended? "
                        "(a camera under another name: --rename_map)"))
    rows.extend(_action_rows(outputs, modes, have, action_space, ckpt))
    rows.extend(processor_rows(ckpt, cfg, options or {}, gives, action_space, benchmark))
    return rows


#: config.json fields that name a model repository (or a local directory) the policy reads
#: when it is built: SmolVLA's backbone, GR00T's base model, X-VLA's tokenizer, Multi-Task DiT's
#: CLIP encoders, pi0-FAST's tokenizers, EO-1's processor, VLA-JEPA's Qwen3-VL
SOURCE_FIELDS = ("vlm_model_name", "base_model_path", "tokenizer_name", "vision_encoder_name", "text_encoder_name",
                 "text_tokenizer_name", "action_tokenizer_name", "vlm_base", "qwen_model_name")


def processor_rows(ckpt: Path, cfg: Mapping[str, Any], options: Mapping[str, str], gives: Mapping[str, Given],
                   action_space: Any, benchmark: BenchmarkConfig) -> list[Row]:
    """What the policy's own processors and config do to the env's inputs (no model is loaded)."""
    rows: list[Row] = []
    tokenizer = _tokenizer_step(ckpt)
    sources = {f"{field} (config)": cfg[field] for field in SOURCE_FIELDS if isinstance(cfg.get(field), str) and cfg[field]}
    if tokenizer is not None and isinstance(tokenizer.get("tokenizer_name"), str):
        sources["tokenizer (preprocessor)"] = tokenizer["tokenizer_name"]
    for key, name in sources.items():
        rows.append(_source_row(key, name))
    if tokenizer is not None:
        first = next(t for names in benchmark.tasks().values() for t in names)
        task = benchmark.policy_task(first)
        wants = f"an instruction, tokenized to <= {tokenizer.get('max_length', '?')} tokens"
        if task:
            rows.append(Row("task", wants, repr(task), "ok"))
        else:
            rows.append(Row("task", wants, "'' (none)", "soft",
                            f"--env.type={benchmark.type_name} gives no instruction (nor does lerobot-eval's env): "
                            f"the policy runs unprompted, as under lerobot-eval"))
    rows.extend(_chunk_rows(cfg, options))
    rows.extend(_padding_rows(cfg, gives, action_space))
    size = cfg.get("resize_imgs_with_padding")
    if isinstance(size, list | tuple) and len(size) == 2:
        width, height = int(size[0]), int(size[1])
        for key, given in gives.items():
            if given.kind == "VISUAL" and len(given.shape) == 3:
                _, h, w = given.shape
                scale = min(width / w, height / h)
                pad_w, pad_h = width - round(w * scale), height - round(h * scale)
                rows.append(Row(f"{key} (resized)", f"{width}x{height}, aspect kept, padded",
                                f"{w}x{h} -> x{scale:.3g}, padding {pad_w}x{pad_h} px", "ok"))
    return rows


def _tokenizer_step(ckpt: Path) -> dict[str, Any] | None:
    """The config of the pre-processor's tokenizer step, if it has one: the one that tokenizes
    the prompt (pi0-FAST's first "tokenizer" step only writes it)."""
    found = [step.get("config") for step in _steps(ckpt, "preprocessor") if "tokenizer" in str(step.get("registry_name", ""))]
    configs = [config if isinstance(config, dict) else {} for config in found]
    return next((config for config in configs if "tokenizer_name" in config), configs[0] if configs else None)


def _source_row(key: str, name: str) -> Row:
    """Where a model the policy loads comes from: a local directory, the cache, the hub."""
    if Path(name).expanduser().is_dir():
        return Row(key, name, "local directory", "ok")
    if not hub.is_hub_id(name):
        return Row(key, name, "not found", "hard", "neither a local directory nor a hub id (ORG/NAME): was the "
                   "checkpoint saved on another machine? point the field at a copy (--policy.<field>=DIR)")
    from huggingface_hub import constants  # optional: huggingface_hub (comes with lerobot)
    from huggingface_hub.file_download import repo_folder_name  # optional: huggingface_hub (comes with lerobot)

    snapshots = hub.cache_root() / repo_folder_name(repo_id=name, repo_type="model") / "snapshots"
    if snapshots.is_dir() and any(snapshots.iterdir()):
        return Row(key, name, f"in the cache ({hub.cache_root()})", "ok")
    if constants.HF_HUB_OFFLINE:
        return Row(key, name, "not in the cache; HF_HUB_OFFLINE is set", "hard",
                   f"download it once with the network (`hf download {name}`), or unset HF_HUB_OFFLINE")
    return Row(key, name, "downloaded from the hub when the policy loads", "soft",
               "needs the network (and HF_TOKEN if the repository is gated); `hf download` it beforehand to check")


def _chunk_rows(cfg: Mapping[str, Any], options: Mapping[str, str]) -> list[Row]:
    chunk = cfg.get("chunk_size")
    steps_raw = options.get("n_action_steps", cfg.get("n_action_steps"))
    if not isinstance(chunk, int) or steps_raw is None:
        return []
    try:
        steps = int(steps_raw)
    except ValueError:
        return []
    if steps > chunk:
        return [Row("n_action_steps", f"<= chunk_size {chunk}", str(steps), "hard",
                    f"--policy.n_action_steps={chunk} or less: a chunk holds {chunk} actions")]
    return [Row("n_action_steps", f"<= chunk_size {chunk}", str(steps), "ok")]


def _padding_rows(cfg: Mapping[str, Any], gives: Mapping[str, Given], action_space: Any) -> list[Row]:
    """State and action zero-padded to the policy's fixed widths (they cannot be wider)."""
    rows = []
    state = gives.get("observation.state")
    action_shape = tuple(getattr(action_space, "shape", None) or ())
    for key, field, dims in (("observation.state", "max_state_dim", state.shape if state else None),
                             ("action", "max_action_dim", action_shape or None)):
        limit = cfg.get(field)
        if not isinstance(limit, int) or not dims:
            continue
        n = int(np.prod(dims))
        label = f"{key} (padded)"
        if n > limit:
            rows.append(Row(label, f"<= {field} {limit}", f"{n} dims", "hard",
                            f"the policy pads to {limit} dims and cannot take {n}: it needs a checkpoint trained "
                            f"with a larger {field} (the width is in its weights)"))
        else:
            rows.append(Row(label, f"<= {field} {limit}", f"{n} dims, zero-padded to {limit}", "ok"))
    return rows


def _shape_fix(key: str, kind: str, shape: tuple[int, ...], given: Given, benchmark: BenchmarkConfig) -> str:
    if kind == "VISUAL" and len(shape) == 3 and shape[0] == given.shape[0]:
        fields = {f for f in getattr(benchmark, "__dataclass_fields__", {})}
        if {"observation_width", "observation_height"} <= fields:
            return f"--env.observation_width={shape[2]} --env.observation_height={shape[1]}"
        return (f"--env.type={benchmark.type_name} renders {given.shape[2]}x{given.shape[1]} images; the checkpoint "
                f"was trained on {shape[2]}x{shape[1]} (another env version or camera?)")
    return (f"the checkpoint was trained on another env or observation type ({kind} {list(shape)}, the env gives "
            f"{list(given.shape)}): check --env.type / --env.obs_type / --env.state_keys")


def _stats_row(key: str, kind: str, modes: Mapping[str, str], have: set[str] | None) -> list[Row]:
    needed = _needed_stats(modes.get(kind, "IDENTITY"))
    if not needed:
        return []
    missing = [f"{key}.{s}" for s in needed if have is None or f"{key}.{s}" not in have]
    if not missing:
        return []
    return [Row(f"{key} (stats)", f"{modes.get(kind)}: {', '.join(needed)}", "missing: " + ", ".join(missing), "hard",
                "the pre-processor cannot normalise it: re-save the checkpoint's processors with the dataset's stats")]


def _action_rows(outputs: Mapping[str, Any], modes: Mapping[str, str], have: set[str] | None, action_space: Any,
                 ckpt: Path) -> list[Row]:
    ft = outputs.get("action")
    space_shape = tuple(getattr(action_space, "shape", None) or ())
    if ft is None:
        return [Row("action", "(no action output)", f"{list(space_shape)}", "hard", "not a policy checkpoint?")]
    shape = tuple(ft.get("shape") or ())
    if shape != space_shape:
        return [Row("action", f"ACTION{list(shape)}", f"env takes {list(space_shape)}", "hard",
                    "the checkpoint drives another robot or control mode (--env.type / --env.control_mode)")]
    rows = [Row("action", f"ACTION{list(shape)}", f"env takes {list(space_shape)}", "ok")]
    rows.extend(_stats_row("action", "ACTION", modes, have))
    low, high = getattr(action_space, "low", None), getattr(action_space, "high", None)
    bounds = _action_range(ckpt)
    if bounds is not None and low is not None and high is not None:
        lo, hi = bounds
        span = np.maximum(np.asarray(high, dtype=float) - np.asarray(low, dtype=float), 1e-9)
        outside = (lo < low - 0.05 * span) | (hi > high + 0.05 * span)
        if np.any(outside):
            rows.append(Row("action (range)", f"dataset [{np.round(lo, 3).tolist()}, {np.round(hi, 3).tolist()}]",
                            f"env bounds [{np.round(low, 3).tolist()}, {np.round(high, 3).tolist()}]", "soft",
                            "the training actions leave the env's bounds: actions get clipped (another action "
                            "space or scale?)"))
    return rows


def _action_range(ckpt: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The dataset's action range, from the stats the post-processor's steps hold."""
    from safetensors.numpy import load_file  # optional: safetensors (comes with lerobot)

    for step in _steps(ckpt, "postprocessor"):
        path = ckpt / str(step.get("state_file") or "")
        if step.get("state_file") and path.is_file():
            data = load_file(str(path))
            if "action.min" in data and "action.max" in data:
                return data["action.min"].astype(float), data["action.max"].astype(float)
    return None


def table(rows: list[Row]) -> str:
    head = ("input", "checkpoint wants", "env gives", "", "fix")
    cells = [head, *[(r.key, r.wants, r.gets, r.status, r.fix) for r in rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(4)) + ("  " + c[4] if c[4] else "") for c in cells]
    lines.insert(1, "-" * min(120, sum(widths) + 8))
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    """One line of the hard problems, for an error message."""
    return "; ".join(f"{r.key}: wants {r.wants}, env gives {r.gets}" + (f" (fix: {r.fix})" if r.fix else "")
                     for r in rows if r.status == "hard")
