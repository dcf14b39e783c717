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
import importlib
import importlib.util
import json
import logging
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from rollbench import quiet, timeline
from rollbench.config.env import ActionProcessor, BenchmarkConfig, ObsProcessor, identity
from rollbench.config.policy import PolicyConfig
from rollbench.errors import ConfigError, PolicyError, did_you_mean, error_line
from rollbench.lerobot_line import before_0_5
from rollbench.policies.base import EpisodeStart, Policy, PolicyContext
from rollbench.policies.checkpoint import REQUIRED_FILES, checkpoint_dir
from rollbench.policies.lerobot_check import declared, preflight, summary
from rollbench.policies.lerobot_plugins import (
    POLICIES_PACKAGE,
    check_action,
    defer_policies_init,
    discover,
    lerobot_type,
    lerobot_types,
    plugin_distributions,
)
from rollbench.policies.lerobot_xvla import env_pipelines, model_action_dim, policy_view, require_libero

log = logging.getLogger(__name__)

INSTALL_HINT = "see docs/lerobot.md (pip install --no-deps lerobot==0.4.4 -r constraints/lerobot.txt)"

#: how each policy type's episode state is kept, per slot where it is checked against the
#: type's own `select_action` at one row per call (tests/test_lerobot.py, tests/test_lerobot_chunking.py):
#: - "chunk" (ACT; pi0-FAST when greedy, `GREEDY`): `select_action` is
#:   `predict_action_chunk(obs)[:, :n_action_steps]` into a queue, so one queue per slot is exact;
#: - "history" (Diffusion, Multi-Task DiT): one history of the last `n_obs_steps` observations
#:   and one action queue per slot, and one torch generator per episode for the sampler's noise,
#:   so a row's draws do not depend on which rows share its call.
#: - "chunk" with per-row noise (SmolVLA, pi0, pi05 through `noise=`: `FLOW`; GR00T, X-VLA,
#:   EO-1 and VLA-JEPA drawn per row around the call: `ROW_NOISE`): the same queues. GR00T N1.5's queue holds the
#:   tail of its chunk (`TAIL`), and an N1.5 call holds one task's rows (`ONE_TASK_PER_CALL`).
#: Every other type runs in lockstep with the policy's own `select_action`, exactly as
#: lerobot-eval runs it.
PATHS = {
    "act": "chunk", "diffusion": "history", "smolvla": "chunk", "pi0": "chunk", "pi05": "chunk",
    "groot": "chunk", "xvla": "chunk", "multi_task_dit": "history", "eo1": "chunk",
    "vla_jepa": "chunk",
}
if not before_0_5():  # pi0-FAST's per-slot path is checked on 0.6 (0.4.4's needs openpi's transformers)
    PATHS["pi0_fast"] = "chunk"

#: types that decode their chunk greedily by default and sample it otherwise (pi0-FAST's
#: `temperature` > 0: `torch.multinomial` from the global RNG for the whole batch): they leave
#: lockstep only when greedy, where a row's tokens do not depend on its batch-mates
GREEDY = {"pi0_fast"}

#: flow-matching types: `predict_action_chunk(obs, noise=...)` takes the noise its sampler
#: starts from, shape (rows, chunk_size, max_action_dim), which LeRobot otherwise draws with
#: `torch.normal` from the global RNG for the whole batch at once. The chunk path draws each
#: row's from its own episode's generator (the same call, so one row per call gives
#: select_action's draws after `torch.manual_seed(batch_seed([seed]))`), which makes a row's
#: actions independent of its batch-mates.
FLOW = {"smolvla", "pi0", "pi05"}

#: types that draw their sampler's noise as one batch-shaped `torch.randn` (EO-1: `torch.normal`)
#: from the global RNG and take no `noise=` (GR00T's and EO-1's `predict_action_chunk` have none;
#: X-VLA's ignores the one it is given): the chunk path draws each row from its episode's generator around the call
#: (`policies/lerobot_noise.py`), the same values one row per call gets from `select_action`
#: after `torch.manual_seed(batch_seed([seed]))`.
ROW_NOISE = {"groot", "xvla", "eo1", "vla_jepa"}

#: GR00T N1.5 (LeRobot 0.4.4's `groot`) plays the tail of its chunks and prompts every row of a
#: call with the first row's task; N1.7 (0.6's) plays the head and formats each row's own task
_GROOT_N15 = {"groot"} if before_0_5() else set()

#: types whose `select_action` plays the last `n_action_steps` actions of each chunk (GR00T
#: N1.5 extends a queue of maxlen `n_action_steps` with its whole chunk), not the first
TAIL = _GROOT_N15

#: policy types that bring their own env processors (LeRobot's `make_env_pre_post_processors`
#: returns the policy's pipelines instead of the env's): `policies/lerobot_xvla.py`
OWNS_ENV_PROCESSORS = {"xvla"}

#: types whose processor reads one task for the whole batch (GR00T N1.5's tokenizes `task[0]`
#: for every row): a call must not mix tasks. The chunk path calls the policy once per task among
#: the rows whose queue ran dry; the lockstep path never mixes them (a batch is one task's
#: envs), and the guard in `act` refuses any caller that would.
ONE_TASK_PER_CALL = set(_GROOT_N15)

#: types that load without the rest of LeRobot's policies: their configuration module and
#: their policy class by name, their processor pipelines from the checkpoint's files (what
#: `make_pre_post_processors` does for every type but GR00T). Any other type goes through
#: `lerobot.policies` whole: its processor steps may register themselves there (SmolVLA's).
LIGHT = {
    "act": "lerobot.policies.act.modeling_act:ACTPolicy",
    "diffusion": "lerobot.policies.diffusion.modeling_diffusion:DiffusionPolicy",
}

OBS_IMAGE = "observation.image"
OBS_IMAGES = "observation.images"
OBS_STATE = "observation.state"
OBS_ENV_STATE = "observation.environment_state"
OBS_ROBOT_STATE = "observation.robot_state"


def _lerobot_version() -> str:
    try:
        return metadata.version("lerobot")
    except Exception:  # not installed, or installed without metadata
        return "unknown"


def check_checkpoint_dir(conf: PolicyConfig) -> Path:
    """The checkpoint's directory (a hub id's cached snapshot), with every file it needs."""
    path = conf.path
    if not path:
        raise ConfigError("--policy.type=lerobot needs --policy.path=<checkpoint dir or hub id ORG/NAME> "
                          "(config.json, model.safetensors, processors)")
    ckpt = checkpoint_dir(conf)
    if not ckpt.is_dir():
        raise ConfigError(f"--policy.path={path}: not a directory, nor a hub id (ORG/NAME); expected a LeRobot "
                          f"checkpoint directory or a repository on the hub")
    missing = [name for name in REQUIRED_FILES if not (ckpt / name).is_file()]
    if missing:
        raise ConfigError(
            f"--policy.path={path}: checkpoint misses {', '.join(missing)}; expected {', '.join(REQUIRED_FILES)} "
            f"(LeRobot >= 0.4 saves the processor pipelines beside the weights)"
        )
    return ckpt


def read_config(ckpt: Path) -> dict[str, Any]:
    """The checkpoint's config.json as saved (no LeRobot import)."""
    try:
        raw = json.loads((ckpt / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"--policy.path={ckpt}: config.json is not readable JSON ({error_line(err)})") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"--policy.path={ckpt}: config.json holds a {type(raw).__name__}, not LeRobot's policy config")
    return raw


def import_config_class(ptype: Any) -> None:
    """Register the config class of `ptype` with LeRobot (only its module for LIGHT types),
    after the installed policy plugins, as lerobot-eval imports them first."""
    discover()
    if ptype in LIGHT:
        defer_policies_init()
        importlib.import_module(f"{POLICIES_PACKAGE}.{ptype}.configuration_{ptype}")
        return
    import lerobot.policies as policies  # optional: lerobot

    getattr(policies, "__all__", None)  # a deferred package runs its __init__ now


def _import_lerobot(conf: PolicyConfig, raw: Mapping[str, Any]) -> Any:
    """Imports torch and the checkpoint type's config class, checks that torch sees
    --policy.device, and returns the torch module."""
    try:
        import torch  # heavy, optional: torch (comes with lerobot); a missing one is a ConfigError here

        import_config_class(raw.get("type"))
        timeline.mark("lerobot_imported")
    except ImportError as err:
        raise ConfigError(f"--policy.type=lerobot needs lerobot and torch ({error_line(err)}); {INSTALL_HINT}") from None
    if conf.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--policy.device={conf.device}: torch sees no CUDA device here")
    if conf.device == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("--policy.device=mps: torch sees no MPS device here")
    return torch


def check_type(ckpt: Path, raw: Mapping[str, Any], expected: str | None) -> None:
    """The checkpoint's type is one LeRobot (or an installed plugin) knows, and the one
    `--policy.type=<a LeRobot type>` named, if it named one."""
    ptype = raw.get("type")
    if expected and ptype != expected:
        raise ConfigError(f"--policy.type={expected}: the checkpoint --policy.path={ckpt} is a {ptype!r} policy "
                          f"(its config.json); give --policy.type={ptype}, or leave --policy.type out")
    from lerobot.configs.policies import PreTrainedConfig  # optional: lerobot

    if ptype in PreTrainedConfig.get_known_choices():
        return
    known = lerobot_types()
    if ptype in known:
        return
    plugins = ", ".join(f"{m} {v}" for m, v in sorted(plugin_distributions().items())) or "none"
    raise ConfigError(
        f"--policy.path={ckpt}: policy type {ptype!r} is unknown to the installed lerobot {_lerobot_version()} "
        f"and its policy plugins ({plugins}).{did_you_mean(str(ptype), known)} Known: {', '.join(known)}. "
        f"The checkpoint needs a newer LeRobot or its plugin (pip install lerobot_policy_<name>)"
    )


_TEMP_LOCK = threading.Lock()


@contextmanager
def _private_temp_dir() -> Iterator[None]:
    """LeRobot's `PreTrainedConfig.from_pretrained` writes the config to a temporary file that it
    never removes (`NamedTemporaryFile(delete=False)`: one `tmp*.json` in /tmp per load, in every
    process that loads); inside this block temporary files go to a folder removed after it. It
    runs before the policy's own threads start (no other thread of rollbench's makes temporary
    files meanwhile); the lock keeps two loads in one process from sharing the swap."""
    with _TEMP_LOCK, tempfile.TemporaryDirectory(prefix="rollbench-lerobot-") as folder:
        saved = tempfile.tempdir
        tempfile.tempdir = folder
        try:
            yield
        finally:
            tempfile.tempdir = saved


def load_config(ckpt: Path, raw: Mapping[str, Any], options: Mapping[str, str], device: str, use_amp: bool) -> Any:
    """The checkpoint's `PreTrainedConfig` with the flags applied, or a ConfigError saying why not."""
    from lerobot.configs.policies import PreTrainedConfig  # optional: lerobot

    version = _lerobot_version()
    ptype = raw.get("type")
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
        with _private_temp_dir():
            return PreTrainedConfig.from_pretrained(str(ckpt), cli_overrides=overrides)
    except (Exception, SystemExit) as err:  # draccus exits on a bad value; the config validates in __post_init__
        raise ConfigError(f"--policy.path={ckpt}: cannot build its {ptype!r} config with {' '.join(overrides)} ({error_line(err)})") from None


def load_policy(cfg: Any, ckpt: Path) -> tuple[Any, Any, Any]:
    """(policy, preprocessor, postprocessor) of the checkpoint, as lerobot-eval loads them."""
    overrides = {"device_processor": {"device": str(cfg.device)}}
    if cfg.type not in LIGHT:
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors  # optional: lerobot

        policy = get_policy_class(cfg.type).from_pretrained(str(ckpt), config=cfg)
        pre, post = make_pre_post_processors(policy_cfg=cfg, pretrained_path=str(ckpt), preprocessor_overrides=overrides)
        return policy, pre, post
    from lerobot.processor import PolicyProcessorPipeline  # optional: lerobot
    from lerobot.processor.converters import (  # optional: lerobot
        batch_to_transition,
        policy_action_to_transition,
        transition_to_batch,
        transition_to_policy_action,
    )

    module, _, name = LIGHT[cfg.type].partition(":")
    policy = getattr(importlib.import_module(module), name).from_pretrained(str(ckpt), config=cfg)
    # make_pre_post_processors(policy_cfg, pretrained_path) for these types, step for step
    pre = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=str(ckpt), config_filename="policy_preprocessor.json", overrides=overrides,
        to_transition=batch_to_transition, to_output=transition_to_batch,
    )
    post = PolicyProcessorPipeline.from_pretrained(
        pretrained_model_name_or_path=str(ckpt), config_filename="policy_postprocessor.json", overrides={},
        to_transition=policy_action_to_transition, to_output=transition_to_policy_action,
    )
    return policy, pre, post


def check_features(ctx: PolicyContext, ckpt: Path, raw: Mapping[str, Any]) -> None:
    """Before any episode: the checkpoint's inputs, stats and action against the benchmark's
    declared features (`rollbench check` does the same from a real observation and prints
    the whole table). A hard mismatch is refused; a soft one is a warning."""
    bench = f"--env.type={ctx.benchmark.type_name}"
    gives = declared(ctx.benchmark, ctx.config.renames())
    if not gives:
        log.warning("%s declares no features; cannot check the checkpoint's inputs against it", bench)
        return
    action_space = ctx.action_space
    if raw.get("type") in OWNS_ENV_PROCESSORS:
        gives, action_space = policy_view(gives, model_action_dim(raw))
    rows = preflight(ckpt, gives, action_space, ctx.benchmark, ctx.config.options)
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
    import einops  # optional: comes with lerobot
    import torch  # heavy, optional: torch (comes with lerobot)

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
        elif key == OBS_ROBOT_STATE:  # LIBERO's tree, for a policy's own env processor: dtypes kept
            out[key] = _tree(value, pick)
    tasks = list(batch.get("task", []))
    out["task"] = tasks if rows is None else [tasks[i] for i in rows]
    return out


def _tree(value: Any, pick: Callable[[Any], np.ndarray]) -> Any:
    import torch  # heavy, optional: torch (comes with lerobot)

    if isinstance(value, Mapping):
        return {k: _tree(v, pick) for k, v in value.items()}
    return torch.from_numpy(np.ascontiguousarray(pick(value)))


def batch_seed(seeds: Iterable[int]) -> int:
    """A torch seed from a batch's episode seeds, in row order (stable across processes)."""
    digest = hashlib.sha256(",".join(str(int(s)) for s in seeds).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class LeRobotPolicy(Policy):
    """One LeRobot checkpoint, batched over slots; episode state per slot where exact."""

    accepts_options = True
    options_help = ("any field of the checkpoint's config (config.json), as lerobot-eval takes it: "
                    "--policy.n_action_steps=8, --policy.num_inference_steps=10; an unknown one is refused with "
                    "the checkpoint's fields (`rollbench check` shows the config)")
    #: `--policy.type=act --policy.path=DIR`: a type no adapter registers is LeRobot's or a plugin's,
    #: checked here (`config.codec.policy_from_flags`); any other is refused with every known type
    type_of = staticmethod(lerobot_type)

    def __init__(self, ctx: PolicyContext) -> None:
        """Checks the checkpoint against the flags and the benchmark now; loads its weights and
        processors on a thread, while the caller starts the env workers (`ready()` waits)."""
        conf = ctx.config
        ckpt = check_checkpoint_dir(conf)
        raw = read_config(ckpt)
        torch = _import_lerobot(conf, raw)
        check_type(ckpt, raw, conf.lerobot_type)
        self.cfg = load_config(ckpt, raw, conf.options, conf.device, conf.use_amp)
        self.owns_env_processors = self.cfg.type in OWNS_ENV_PROCESSORS
        self.env_pre: Any = None  # its own env processors (LeRobot's pipelines), once loaded
        self.env_post: Any = None
        if self.owns_env_processors:
            require_libero(ctx.benchmark, ckpt, self.cfg.type)
        self._benchmark = ctx.benchmark
        check_features(ctx, ckpt, raw)
        self.name = str(ckpt)
        self.device = torch.device(self.cfg.device)
        self.use_amp = bool(conf.use_amp)
        self.seeding = conf.seeding
        path = self._choose_path(ctx.seed)
        self.path = path
        self.per_slot_state = path != "lockstep"  # type: ignore[misc]
        # env steps served per network call (`rollbench tune` amortises a call over them)
        self.steps_per_inference = 1 if path == "ensemble" else max(1, int(getattr(self.cfg, "n_action_steps", 1) or 1))
        self._queues: dict[int, deque[Any]] = {}
        self._ensemblers: dict[int, Any] = {}
        self._history: dict[int, dict[str, deque[Any]]] = {}
        self._noise: dict[int, Any] = {}  # slot -> torch.Generator of its episode
        self._load_error: ConfigError | None = None
        timeline.mark("policy_checked")
        self._loader: threading.Thread | None = threading.Thread(
            target=self._load, args=(ckpt,), name="rollbench-policy-load", daemon=True
        )
        self._loader.start()

    def _choose_path(self, seed: int | None) -> str:
        """How episode state is kept (see `PATHS`): "chunk", "history", "ensemble" or "lockstep".
        --policy.seeding=lerobot-eval runs in lockstep and seeds the RNGs here, from the run's `seed`."""
        path = PATHS.get(self.cfg.type, "lockstep")
        if path == "chunk" and getattr(self.cfg, "temporal_ensemble_coeff", None) is not None:
            path = "ensemble"
        if self.cfg.type in GREEDY and getattr(self.cfg, "temperature", None):
            path = "lockstep"
        if self.seeding == "lerobot-eval":
            if seed is None:
                raise ConfigError("--policy.seeding=lerobot-eval needs a run's --seed (rollbench eval); use episode here")
            # lerobot-eval's order: `set_seed(--seed)` (random, numpy, torch), then the policy is built
            # (its random init draws from torch's RNG before the weights replace it), then one
            # `select_action` per step over each batch, batch after batch: lockstep only
            path = "lockstep"
            from lerobot.utils.random_utils import set_seed  # optional: lerobot

            set_seed(seed)
        return path

    def _load(self, ckpt: Path) -> None:
        try:
            with quiet.to_debug_log("lerobot"):  # its "Loading weights from local directory" (a print)
                self.policy, self.preprocessor, self.postprocessor = load_policy(self.cfg, ckpt)
            quiet.reclaim()
            self.policy.eval()
            if self.owns_env_processors:
                self.env_pre, self.env_post, dropped = env_pipelines(self.cfg, self._benchmark, self.preprocessor)
                if dropped:
                    log.info("%s: its pre-processor has %s already: not applied twice (LeRobot 0.4.4's "
                             "lerobot-eval applies them twice and fails)", ckpt.name, ", ".join(dropped))
            timeline.mark("policy_ready")
        except Exception as err:  # unknown processor step, mismatched weights, ...: the checkpoint's
            self._load_error = ConfigError(
                f"--policy.path={ckpt}: lerobot {_lerobot_version()} cannot load it ({error_line(err)}); "
                f"a checkpoint from a newer LeRobot needs that LeRobot"
            )

    def ready(self) -> None:
        """Wait for the weights and processors; raise what loading them raised."""
        if self._loader is not None:
            self._loader.join()
            self._loader = None
        if self._load_error is not None:
            raise self._load_error

    def __copy__(self) -> LeRobotPolicy:
        """Shared weights and processors; private episode state (lockstep runs one copy per task)."""
        self.ready()
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.policy = copy.copy(self.policy)  # its reset() rebinds its queues on the copy
        new._queues, new._ensemblers, new._history, new._noise = {}, {}, {}, {}
        return new

    def torch_modules(self) -> Sequence[Any]:
        self.ready()
        return [self.policy]

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        self.ready()
        if self.path == "lockstep":
            self.policy.reset()  # lockstep resets whole batches: every slot of it starts here
            if self.seeding == "lerobot-eval":
                return  # one stream from --seed, as lerobot-eval draws it
            # A sampling policy (Diffusion's noise) draws from torch's global RNG: seed it from
            # the batch's episode seeds, so its episodes depend on their seeds and the batch's
            # make-up, not on what ran before in this process (or before a resume).
            import torch  # heavy, optional: torch (comes with lerobot)

            torch.manual_seed(batch_seed(e.seed for e in episodes))
            return
        import torch  # heavy, optional: torch (comes with lerobot)

        for s, episode in zip(slots, episodes, strict=True):
            self._queues.pop(s, None)
            self._ensemblers.pop(s, None)
            self._history.pop(s, None)
            if self.path == "history" or self.cfg.type in FLOW or self.cfg.type in ROW_NOISE:
                # seeded as lockstep seeds a batch of this one episode: at one row per call the
                # draws are select_action's after `torch.manual_seed(batch_seed([seed]))`
                self._noise[s] = torch.Generator().manual_seed(batch_seed([episode.seed]))

    def _autocast(self) -> AbstractContextManager[Any]:
        import torch  # heavy, optional: torch (comes with lerobot)

        return torch.autocast(device_type=self.device.type) if self.use_amp else nullcontext()

    def env_processors(self, benchmark: BenchmarkConfig) -> tuple[ObsProcessor, ActionProcessor] | None:
        """An X-VLA's: the observation as LeRobot's `preprocess_observation` leaves it
        (`lerobot_observation`), for its own env processors, which `_inputs` and `act` apply
        (`policies/lerobot_xvla.py`)."""
        if not self.owns_env_processors:
            return None
        return benchmark.lerobot_observation, identity

    def _inputs(self, batch: Mapping[str, Any], rows: Sequence[int] | None) -> dict[str, Any]:
        observation = to_policy_batch(batch, rows)
        if self.env_pre is not None:  # where lerobot-eval runs the env's pre-processor
            observation = self.env_pre(observation)
        return self.preprocessor(observation)  # type: ignore[no-any-return]

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        import torch  # heavy, optional: torch (comes with lerobot)

        self.ready()
        if self.path == "lockstep" and self.cfg.type in ONE_TASK_PER_CALL and len(set(batch.get("task") or [])) > 1:
            raise PolicyError(
                f"{self.cfg.type!r} policies take one task per call (its processor reads the first row's task for "
                f"every row); this call mixed {sorted(set(batch['task']))}"
            )
        with torch.inference_mode(), self._autocast():
            if self.path == "lockstep":
                action = self._select_action(self._inputs(batch, None), len(slots))
            elif self.path == "chunk":
                action = self._act_chunk(batch, slots)
            elif self.path == "history":
                action = self._act_history(batch, slots)
            else:
                action = self._act_ensemble(batch, slots)
            action = self.postprocessor(action)
            if self.env_post is not None:
                action = self.env_post({"action": action})["action"]
        # the env gets the dtype lerobot-eval hands it (its `.numpy()` of the post-processor's
        # output: float64 for some checkpoints, e.g. a tiny pi0's): a float32 copy of a float64
        # action moves gym-pusht's agent differently in the last bits; numpy has no bfloat16
        action = action.to("cpu")
        return (action.float() if action.dtype == torch.bfloat16 else action).numpy()  # type: ignore[no-any-return]

    def _select_action(self, inputs: dict[str, Any], rows: int) -> Any:
        """The policy's own `select_action`, its output checked against LeRobot's interface: a
        plugin's policy may return something else, or read inputs no env gives."""
        try:
            action = self.policy.select_action(inputs)
        except KeyError as err:
            raise PolicyError(
                f"{self.cfg.type!r} policy's select_action asked for input {err} that lerobot-eval does not give "
                f"(it gets {', '.join(sorted(inputs))}); rollbench cannot evaluate this policy type"
            ) from err
        feature = getattr(self.cfg, "action_feature", None)
        return check_action(action, self.cfg.type, rows, feature.shape[0] if feature is not None else None)

    def _act_chunk(self, batch: Mapping[str, Any], slots: Sequence[int]) -> Any:
        import torch  # heavy, optional: torch (comes with lerobot)

        dry = [i for i, s in enumerate(slots) if not self._queues.get(s)]
        calls = [dry] if dry else []
        if dry and self.cfg.type in ONE_TASK_PER_CALL:  # one call per task among the dry rows
            tasks = batch.get("task") or [""] * len(slots)
            by_task: dict[str, list[int]] = {}
            for i in dry:
                by_task.setdefault(tasks[i], []).append(i)
            calls = list(by_task.values())
        for rows in calls:
            chunk = self._predict_chunk(self._inputs(batch, rows), [self._noise.get(slots[i]) for i in rows])
            for row, i in enumerate(rows):
                self._queues[slots[i]] = deque(chunk[row])
        return torch.stack([self._queues[s].popleft() for s in slots])

    def _predict_chunk(self, inputs: dict[str, Any], generators: Sequence[Any]) -> Any:
        """`predict_action_chunk` on these rows, each row's noise from its episode's generator,
        sliced to the `n_action_steps` actions the type's `select_action` plays."""
        import torch  # heavy, optional: torch (comes with lerobot)

        n, ptype = self.cfg.n_action_steps, self.cfg.type
        if ptype in FLOW:
            shape = (1, self.cfg.chunk_size, self.cfg.max_action_dim)
            noise = torch.cat([torch.normal(0.0, 1.0, size=shape, generator=g) for g in generators])
            chunk = self.policy.predict_action_chunk(inputs, noise=noise.to(self.device))
        elif ptype in ROW_NOISE:
            from rollbench.policies.lerobot_noise import RowNoise  # heavy: lerobot_noise imports torch at its top

            with RowNoise(generators, ptype) as mode:
                chunk = self.policy.predict_action_chunk(inputs)
            if mode.draws != 1:  # a LeRobot release that samples otherwise: say so, never guess
                raise PolicyError(f"{ptype!r} policy drew its noise {mode.draws} times in one chunk, expected once; "
                                  f"run it with --policy.seeding=lerobot-eval (lockstep, the policy's own draws)")
        else:
            chunk = self.policy.predict_action_chunk(inputs)
        return chunk[:, -n:] if ptype in TAIL else chunk[:, :n]

    def _act_history(self, batch: Mapping[str, Any], slots: Sequence[int]) -> Any:
        """Diffusion's or Multi-Task DiT's `select_action`, one history and one queue per slot.

        Every row's observation enters its slot's history (the first one fills it, as LeRobot's
        `populate_queues` does); the rows whose queue ran dry get one batched sample, each
        row's noise (the prior and every sampler step's) from its own episode's generator:
        passed to Diffusion's sampler, drawn per row around Multi-Task DiT's (`RowNoise`), whose
        prompt tokens are the current row's, as its `select_action` reads them.
        """
        import torch  # heavy, optional: torch (comes with lerobot)

        cfg = self.cfg
        obs = self._inputs(batch, None)
        if cfg.image_features:
            obs[OBS_IMAGES] = torch.stack([obs[k] for k in cfg.image_features], dim=-4)
        keys = [k for k in (OBS_STATE, OBS_IMAGES, OBS_ENV_STATE) if k in obs and k in self.policy._queues]
        self._add_to_history(obs, keys, slots)
        dry = [i for i, s in enumerate(slots) if not self._queues.get(s)]
        if dry:
            stacked = {k: torch.stack([torch.stack(list(self._history[slots[i]][k])) for i in dry]) for k in keys}
            gens = [self._noise[slots[i]] for i in dry]
            if cfg.type == "multi_task_dit":
                from rollbench.policies.lerobot_noise import RowNoise  # heavy: lerobot_noise imports torch at its top

                rest = {k: v[dry] for k, v in obs.items() if k not in keys and isinstance(v, torch.Tensor)}
                with RowNoise(gens, cfg.type):
                    chunk = self.policy._generate_actions({**rest, **stacked})
            else:
                model = self.policy.diffusion
                dtype = next(model.parameters()).dtype
                shape = (1, cfg.horizon, cfg.action_feature.shape[0])
                noise = torch.cat([torch.randn(shape, generator=g, dtype=dtype) for g in gens]).to(self.device)
                cond = model._prepare_global_conditioning(stacked)
                sample = model.conditional_sample(len(dry), global_cond=cond, generator=gens, noise=noise)
                start = cfg.n_obs_steps - 1  # the chunk starts at the current observation (generate_actions)
                chunk = sample[:, start : start + cfg.n_action_steps]
            for row, i in enumerate(dry):
                self._queues[slots[i]] = deque(chunk[row])
        return torch.stack([self._queues[s].popleft() for s in slots])

    def _add_to_history(self, obs: Mapping[str, Any], keys: Sequence[str], slots: Sequence[int]) -> None:
        """Adds each row's observation (its `keys`) to its slot's history of the last `n_obs_steps`;
        the first observation of an episode fills its history, as LeRobot's `populate_queues` does."""
        n_obs_steps = self.cfg.n_obs_steps
        for i, s in enumerate(slots):
            history = self._history.setdefault(s, {k: deque(maxlen=n_obs_steps) for k in keys})
            for k in keys:
                if history[k]:
                    history[k].append(obs[k][i])
                else:
                    history[k].extend([obs[k][i]] * n_obs_steps)

    def _act_ensemble(self, batch: Mapping[str, Any], slots: Sequence[int]) -> Any:
        import torch  # heavy, optional: torch (comes with lerobot)
        from lerobot.policies.act.modeling_act import ACTTemporalEnsembler  # optional: lerobot

        chunk = self.policy.predict_action_chunk(self._inputs(batch, None))
        out = []
        for row, s in enumerate(slots):
            ens = self._ensemblers.get(s)
            if ens is None:
                ens = self._ensemblers[s] = ACTTemporalEnsembler(self.cfg.temporal_ensemble_coeff, self.cfg.chunk_size)
            out.append(ens.update(chunk[row : row + 1])[0])
        return torch.stack(out)

    def close(self) -> None:
        if self._loader is not None:  # a run refused before its first step: let the load end
            self._loader.join()
            self._loader = None
        self._queues, self._ensemblers, self._history, self._noise = {}, {}, {}, {}
