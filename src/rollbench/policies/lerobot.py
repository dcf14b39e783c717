"""A LeRobot `PreTrainedPolicy` checkpoint: `--policy.type=lerobot --policy.path=<dir>`.

The directory is what `lerobot-train` saves (`config.json`, `model.safetensors`) plus the
processor pipelines (`policy_preprocessor.json`, `policy_postprocessor.json`). The batch
is built as `lerobot-eval` builds it (`lerobot.envs.utils.preprocess_observation`: images
uint8 HWC -> float32 CHW in [0, 1], states as float32, `task` as a list of strings), the
preprocessor (normalise, device) runs on observations, the postprocessor (unnormalise)
on actions. Other `--policy.<field>=value` flags override checkpoint config fields the
way `lerobot-eval` does (draccus overrides, e.g. `--policy.n_action_steps=5`).

Episode state is kept per slot where the policy's chunk API allows it (see `PATHS` and
docs/lerobot.md); otherwise the adapter asks for lockstep mode and calls
`select_action` on whole batches, exactly as `lerobot-eval` does.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from rollbench.errors import ConfigError, did_you_mean
from rollbench.policies.base import EpisodeStart, Policy, PolicyContext

log = logging.getLogger(__name__)

REQUIRED_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")
INSTALL_HINT = "see docs/lerobot.md (pip install --no-deps lerobot==0.4.4 -r constraints/lerobot.txt)"

#: how each policy type's episode state is kept. "chunk": `select_action` is
#: `predict_action_chunk(obs)[:, :n_action_steps]` into a queue, so one queue per slot is
#: exact (checked bit for bit against LeRobot's own select_action for ACT). Every other type
#: runs in lockstep with the policy's own `select_action`, exactly as lerobot-eval runs it:
#: pi0/pi05/groot follow the same chunk pattern in 0.4.4 and Diffusion needs a per-slot
#: observation history, but neither is tested here yet, so neither takes a per-slot path.
PATHS = {"act": "chunk"}

OBS_IMAGE = "observation.image"
OBS_IMAGES = "observation.images"
OBS_STATE = "observation.state"
OBS_ENV_STATE = "observation.environment_state"


def _lerobot_version() -> str:
    try:
        from importlib import metadata

        return metadata.version("lerobot")
    except Exception:  # not installed, or installed without metadata
        return "unknown"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def check_checkpoint_dir(path: str | None) -> Path:
    if not path:
        raise ConfigError("--policy.type=lerobot needs --policy.path=<checkpoint dir> (config.json, model.safetensors, processors)")
    ckpt = Path(path)
    if not ckpt.is_dir():
        raise ConfigError(f"--policy.path={path}: not a directory; expected a LeRobot checkpoint directory (hub ids are not supported)")
    missing = [name for name in REQUIRED_FILES if not (ckpt / name).is_file()]
    if missing:
        raise ConfigError(
            f"--policy.path={path}: checkpoint misses {', '.join(missing)}; expected {', '.join(REQUIRED_FILES)} "
            f"(LeRobot >= 0.4 saves the processor pipelines beside the weights)"
        )
    return ckpt


def load_config(ckpt: Path, options: Mapping[str, str], device: str, use_amp: bool) -> Any:
    """The checkpoint's `PreTrainedConfig` with the flags applied, or a ConfigError saying why not."""
    from lerobot.configs.policies import PreTrainedConfig

    version = _lerobot_version()
    try:
        raw = json.loads((ckpt / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"--policy.path={ckpt}: config.json is not readable JSON ({_first_line(err)})") from err
    ptype = raw.get("type") if isinstance(raw, dict) else None
    known = PreTrainedConfig.get_known_choices()
    if ptype not in known:
        raise ConfigError(
            f"--policy.path={ckpt}: policy type {ptype!r} is unknown to the installed lerobot {version} "
            f"(known: {', '.join(sorted(known))}); the checkpoint needs a newer LeRobot or a policy plugin"
        )
    cls = PreTrainedConfig.get_choice_class(ptype)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - fields - {"type"})
    if unknown:
        raise ConfigError(
            f"--policy.path={ckpt}: config.json has fields unknown to lerobot {version}'s {ptype!r} config "
            f"({', '.join(unknown)}); it was saved by a newer LeRobot: upgrade lerobot"
        )
    for key in options:
        if key.split(".")[0] not in fields:
            hint = did_you_mean(key, sorted(fields), "--policy.{}".format)
            raise ConfigError(f"unknown flag --policy.{key} for a LeRobot {ptype!r} checkpoint.{hint}")
    overrides = [f"--{k}={v}" for k, v in options.items()]
    overrides += [f"--device={device}", f"--use_amp={str(use_amp).lower()}"]
    try:
        return PreTrainedConfig.from_pretrained(str(ckpt), cli_overrides=overrides)
    except (Exception, SystemExit) as err:  # draccus exits on a bad value; the config validates in __post_init__
        raise ConfigError(f"--policy.path={ckpt}: cannot build its {ptype!r} config with {' '.join(overrides)} ({_first_line(err)})") from None


def check_features(ctx: PolicyContext, ckpt: Path) -> None:
    """Before any episode: the checkpoint's inputs, stats and action against the benchmark's
    declared features (`rollbench check` does the same from a real observation and prints
    the whole table). A hard mismatch is refused; a soft one is a warning."""
    from rollbench.policies.lerobot_check import declared, preflight, summary

    bench = f"--env.type={ctx.benchmark.type_name}"
    gives = declared(ctx.benchmark, ctx.config.renames())
    if not gives:
        log.warning("%s declares no features; cannot check the checkpoint's inputs against it", bench)
        return
    rows = preflight(ckpt, gives, ctx.action_space, ctx.benchmark)
    for r in rows:
        if r.status == "soft":
            (log.info if r.wants == "(not read)" else log.warning)("%s: %s: %s vs %s; %s", ckpt.name, r.key, r.wants, r.gets, r.fix)
    if any(r.status == "hard" for r in rows):
        raise ConfigError(
            f"--policy.path={ckpt}: the checkpoint's features do not match {bench}: {summary(rows)}; "
            f"`rollbench check` with the same flags prints the whole table"
        )


def to_policy_batch(batch: Mapping[str, Any], rows: Sequence[int] | None = None) -> dict[str, Any]:
    """rollbench's numpy batch -> LeRobot's, as `preprocess_observation` + `add_envs_task` build it."""
    import einops
    import torch

    def pick(value: Any) -> np.ndarray:
        arr = np.asarray(value)
        return arr if rows is None else arr[list(rows)]

    out: dict[str, Any] = {}
    for key, value in batch.items():
        if key == OBS_IMAGE or key.startswith(OBS_IMAGES + "."):
            img = torch.from_numpy(np.ascontiguousarray(pick(value)))
            if img.dtype != torch.uint8:
                raise ConfigError(f"{key}: LeRobot policies expect uint8 images, the env gives {img.dtype}")
            img = einops.rearrange(img, "b h w c -> b c h w").contiguous().type(torch.float32)
            img /= 255
            out[key] = img
        elif key in (OBS_STATE, OBS_ENV_STATE):
            out[key] = torch.from_numpy(np.ascontiguousarray(pick(value))).float()
    tasks = list(batch.get("task", []))
    out["task"] = tasks if rows is None else [tasks[i] for i in rows]
    return out


def batch_seed(seeds: Iterable[int]) -> int:
    """A torch seed from a batch's episode seeds, in row order (stable across processes)."""
    digest = hashlib.sha256(",".join(str(int(s)) for s in seeds).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class LeRobotPolicy(Policy):
    """One LeRobot checkpoint, batched over slots; episode state per slot where exact."""

    accepts_options = True

    def __init__(self, ctx: PolicyContext) -> None:
        try:
            import torch
            from lerobot.policies.factory import get_policy_class, make_pre_post_processors
        except ImportError as err:
            raise ConfigError(f"--policy.type=lerobot needs lerobot and torch ({_first_line(err)}); {INSTALL_HINT}") from None
        conf = ctx.config
        ckpt = check_checkpoint_dir(conf.path)
        if conf.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"--policy.device={conf.device}: torch sees no CUDA device here")
        if conf.device == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("--policy.device=mps: torch sees no MPS device here")
        self.cfg = load_config(ckpt, conf.options, conf.device, conf.use_amp)
        check_features(ctx, ckpt)
        try:
            self.policy = get_policy_class(self.cfg.type).from_pretrained(str(ckpt), config=self.cfg)
            self.preprocessor, self.postprocessor = make_pre_post_processors(
                policy_cfg=self.cfg, pretrained_path=str(ckpt),
                preprocessor_overrides={"device_processor": {"device": str(self.cfg.device)}},
            )
        except Exception as err:  # unknown processor step, mismatched weights, ...: the checkpoint's
            raise ConfigError(
                f"--policy.path={ckpt}: lerobot {_lerobot_version()} cannot load it ({_first_line(err)}); "
                f"a checkpoint from a newer LeRobot needs that LeRobot"
            ) from None
        self.policy.eval()
        self.name = str(ckpt)
        self.device = torch.device(self.cfg.device)
        self.use_amp = bool(conf.use_amp)
        path = PATHS.get(self.cfg.type, "lockstep")
        if path == "chunk" and getattr(self.cfg, "temporal_ensemble_coeff", None) is not None:
            path = "ensemble"
        self.path = path
        self.per_slot_state = path != "lockstep"  # type: ignore[misc]
        # env steps served per network call (`rollbench tune` amortises a call over them)
        self.steps_per_inference = 1 if path == "ensemble" else max(1, int(getattr(self.cfg, "n_action_steps", 1) or 1))
        self._queues: dict[int, deque[Any]] = {}
        self._ensemblers: dict[int, Any] = {}

    def __copy__(self) -> LeRobotPolicy:
        """Shared weights and processors; private episode state (lockstep runs one copy per task)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.policy = copy.copy(self.policy)  # its reset() rebinds its queues on the copy
        new._queues, new._ensemblers = {}, {}
        return new

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        if self.path == "lockstep":
            self.policy.reset()  # lockstep resets whole batches: every slot of it starts here
            # A sampling policy (Diffusion's noise) draws from torch's global RNG: seed it from
            # the batch's episode seeds, so its episodes depend on their seeds and the batch's
            # make-up, not on what ran before in this process (or before a resume).
            import torch

            torch.manual_seed(batch_seed(e.seed for e in episodes))
            return
        for s in slots:
            self._queues.pop(s, None)
            self._ensemblers.pop(s, None)

    def _autocast(self) -> AbstractContextManager[Any]:
        import torch

        return torch.autocast(device_type=self.device.type) if self.use_amp else nullcontext()

    def _inputs(self, batch: Mapping[str, Any], rows: Sequence[int] | None) -> dict[str, Any]:
        return self.preprocessor(to_policy_batch(batch, rows))  # type: ignore[no-any-return]

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        import torch

        with torch.inference_mode(), self._autocast():
            if self.path == "lockstep":
                action = self.policy.select_action(self._inputs(batch, None))
            elif self.path == "chunk":
                action = self._act_chunk(batch, slots)
            else:
                action = self._act_ensemble(batch, slots)
            action = self.postprocessor(action)
        return action.to("cpu").float().numpy()  # type: ignore[no-any-return]

    def _act_chunk(self, batch: Mapping[str, Any], slots: Sequence[int]) -> Any:
        import torch

        dry = [i for i, s in enumerate(slots) if not self._queues.get(s)]
        if dry:
            chunk = self.policy.predict_action_chunk(self._inputs(batch, dry))[:, : self.cfg.n_action_steps]
            for row, i in enumerate(dry):
                self._queues[slots[i]] = deque(chunk[row])
        return torch.stack([self._queues[s].popleft() for s in slots])

    def _act_ensemble(self, batch: Mapping[str, Any], slots: Sequence[int]) -> Any:
        import torch
        from lerobot.policies.act.modeling_act import ACTTemporalEnsembler

        chunk = self.policy.predict_action_chunk(self._inputs(batch, None))
        out = []
        for row, s in enumerate(slots):
            ens = self._ensemblers.get(s)
            if ens is None:
                ens = self._ensemblers[s] = ACTTemporalEnsembler(self.cfg.temporal_ensemble_coeff, self.cfg.chunk_size)
            out.append(ens.update(chunk[row : row + 1])[0])
        return torch.stack(out)

    def close(self) -> None:
        self._queues, self._ensemblers = {}, {}
