"""Small random-init LeRobot checkpoints for the adapter's tests and bench/vs_lerobot.py.

A checkpoint is what `lerobot-train` leaves in `pretrained_model/`: `config.json`,
`model.safetensors` and the processor pipelines (`policy_preprocessor.json`,
`policy_postprocessor.json` with their normalizer stats). LeRobot 0.4.4 refuses a
checkpoint without the pipelines, so they are saved from `make_pre_post_processors`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from rollbench.config.env import BenchmarkConfig

# lerobot-eval, with two changes made in its process (argv[1]: the step limit, argv[2]: "1" to
# keep its videos): LeRobot's MetaWorld env ignores --env.episode_length (its rollout always
# runs MetaWorld's 500 steps), and lerobot-eval always renders 10 videos per task. Neither
# change touches an episode's numbers; the cap is what rollbench's --env.episode_length does.
_CAPPED_LEROBOT_EVAL = """
import sys
import lerobot.envs.metaworld as mw
import lerobot.scripts.lerobot_eval as le
cap, videos = int(sys.argv.pop(1)), sys.argv.pop(1) == "1"
init = mw.MetaworldEnv.__init__
def capped(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self._max_episode_steps = cap
mw.MetaworldEnv.__init__ = capped
if not videos:
    eval_all = le.eval_policy_all
    le.eval_policy_all = lambda *args, **kwargs: eval_all(*args, **{**kwargs, "max_episodes_rendered": 0})
le.main()
"""


def capped_lerobot_eval(max_steps: int, videos: bool, *flags: str) -> list[str]:
    """The command line of lerobot-eval on MetaWorld with episodes of at most `max_steps` steps."""
    return [sys.executable, "-c", _CAPPED_LEROBOT_EVAL, str(max_steps), "1" if videos else "0", *flags]


def lerobot_eval_pusht(
    ckpt: Path,
    out: Path,
    *,
    episodes: int,
    length: int,
    seed: int,
    batch_size: int,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> list[tuple[bool, float, float]]:
    """Per-episode (success, sum_reward, max_reward) of `lerobot-eval` on PushT with sync envs
    (0.6 defaults to async ones, which crash on PushT); episode i has seed `seed + i`."""
    import json
    import os
    import subprocess

    tests = str(Path(__file__).resolve().parent)
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("lerobot-eval")),
            f"--policy.path={ckpt}",
            "--policy.device=cpu",
            "--eval.use_async_envs=false",
            "--env.type=pusht",
            f"--env.episode_length={length}",
            f"--eval.n_episodes={episodes}",
            f"--eval.batch_size={batch_size}",
            f"--seed={seed}",
            f"--output_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (task,) = json.loads((out / "eval_info.json").read_text())["per_task"]
    m = task["metrics"]
    return list(zip(m["successes"], m["sum_rewards"], m["max_rewards"], strict=True))


def policy_features(benchmark: BenchmarkConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(input_features, output_features) in LeRobot's types, images channel-first."""
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    for key, ft in benchmark.features.items():
        kind = FeatureType[ft.type]
        shape = tuple(ft.shape)
        if kind is FeatureType.VISUAL:
            h, w, c = shape
            shape = (c, h, w)
        (outputs if kind is FeatureType.ACTION else inputs)[key] = PolicyFeature(type=kind, shape=shape)
    return inputs, outputs


def dataset_stats(inputs: dict[str, Any], outputs: dict[str, Any], action_mean: float, action_std: float) -> dict[str, Any]:
    """Plausible normalisation stats: images in [0, 1], states and actions around `action_mean`."""
    from lerobot.configs.types import FeatureType

    stats: dict[str, Any] = {}
    for key, ft in {**inputs, **outputs}.items():
        if ft.type is FeatureType.VISUAL:
            c = ft.shape[0]
            stats[key] = {
                "mean": torch.full((c, 1, 1), 0.5), "std": torch.full((c, 1, 1), 0.25),
                "min": torch.zeros(c, 1, 1), "max": torch.ones(c, 1, 1),
            }
        else:
            (d,) = ft.shape
            stats[key] = {
                "mean": torch.full((d,), action_mean), "std": torch.full((d,), action_std),
                "min": torch.full((d,), action_mean - 2 * action_std), "max": torch.full((d,), action_mean + 2 * action_std),
            }
    return stats


def make_checkpoint(
    out: Path,
    benchmark: BenchmarkConfig,
    policy_type: str = "act",
    seed: int = 0,
    action_mean: float = 256.0,
    action_std: float = 100.0,
    inputs: dict[str, Any] | None = None,
    stats: dict[str, dict[str, Any]] | None = None,
    **overrides: Any,
) -> Path:
    """Save a tiny random-init policy of `policy_type` for `benchmark`'s features into `out`.

    `inputs` replaces the input features (e.g. an ALOHA-shaped state to test the mismatch error);
    `stats` replaces normalisation stats per key (e.g. `{"action": {"mean": ..., "std": ...}}`).
    """
    from lerobot.policies.factory import get_policy_class, make_policy_config

    bench_inputs, outputs = policy_features(benchmark)
    inputs = bench_inputs if inputs is None else inputs
    small: dict[str, Any] = {"device": "cpu"}
    if policy_type == "act":
        small.update(
            chunk_size=10, n_action_steps=10, dim_model=32, n_heads=2, dim_feedforward=64,
            n_encoder_layers=1, n_decoder_layers=1, n_vae_encoder_layers=1, latent_dim=8,
            pretrained_backbone_weights=None,
        )
    elif policy_type == "diffusion":
        small.update(
            n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=(32, 64), kernel_size=3, n_groups=4,
            diffusion_step_embed_dim=32, num_inference_steps=4, num_train_timesteps=10,
            pretrained_backbone_weights=None, spatial_softmax_num_keypoints=8,
            crop_shape=None, use_group_norm=True,
        )
    small.update(overrides)
    cfg = make_policy_config(policy_type, input_features=inputs, output_features=outputs, **small)
    torch.manual_seed(seed)
    policy = get_policy_class(policy_type)(cfg)
    all_stats = dataset_stats(inputs, outputs, action_mean, action_std)
    for key, values in (stats or {}).items():
        all_stats[key] = {**all_stats[key], **{k: torch.as_tensor(v, dtype=torch.float32) for k, v in values.items()}}
    return save_like_lerobot_train(policy, cfg, out, all_stats)


def make_steered_checkpoint(
    out: Path, benchmark: BenchmarkConfig, bias_task: str, gain: float, drift: tuple[float, ...], seeds: tuple[int, ...] = (0, 1, 2, 3)
) -> Path:
    """A random-init ACT whose actions are `gain * (raw - bias) + drift` (then clipped by the env).

    A random-init ACT's raw (normalised) output is nearly constant: a bias set by its query
    embeddings, plus a part that depends on what it sees, about 100x smaller. The action stats
    subtract the bias (measured on the reset observations of `bias_task` for `seeds`) and
    scale the rest by `gain`, so the episodes depend on the inputs (a flipped image or another
    scene changes them), while `drift` moves the arm somewhere useful. The weights are those
    of `make_checkpoint(seed=0)`. Renders in this process: torch's triton must be imported
    first (tests/conftest.py does it) and MUJOCO_GL set.
    """
    import numpy as np

    from rollbench.config.policy import PolicyConfig
    from rollbench.policies.base import EpisodeStart, PolicyContext, make_policy

    raw_ckpt = make_checkpoint(out.with_name(out.name + "-raw"), benchmark, action_mean=0.0, action_std=1.0)
    env = benchmark.make_task_env(bias_task)
    try:
        policy = make_policy(PolicyContext(PolicyConfig(type="lerobot", path=str(raw_ckpt)), benchmark, env.action_space))
        raw = []
        for slot, seed in enumerate(seeds):
            obs, _ = env.reset(seed=seed)
            policy.reset([slot], [EpisodeStart(bias_task, bias_task, bias_task, slot, seed)])
            batch = {"observation.image": obs["pixels"][None], "observation.state": obs["agent_pos"][None], "task": [bias_task]}
            raw.append(policy.act(batch, [slot])[0])
    finally:
        env.close()
    bias = np.mean(raw, axis=0)
    mean = (np.asarray(drift, dtype=np.float64) - gain * bias).tolist()
    return make_checkpoint(out, benchmark, action_mean=0.0, action_std=1.0, stats={"action": {"mean": mean, "std": [gain] * len(mean)}})


def make_adapter(ckpt: Path, benchmark: BenchmarkConfig, seed: int | None = None, seeding: str = "episode",
                 **options: str) -> Any:
    """rollbench's LeRobot adapter for `ckpt` on `benchmark`'s first task, loaded (`ready()`: the
    weights load on a thread, and these tests reach into them); `seeding` is `--policy.seeding`."""
    from rollbench.config.policy import PolicyConfig
    from rollbench.policies.base import PolicyContext, make_policy

    env = benchmark.make_task_env(next(t for names in benchmark.tasks().values() for t in names))
    try:
        space = env.action_space
    finally:
        env.close()
    policy = make_policy(PolicyContext(PolicyConfig(type="lerobot", path=str(ckpt), options=options, seeding=seeding), benchmark, space, seed))
    policy.ready()
    return policy


def save_like_lerobot_train(policy: Any, cfg: Any, out: Path, stats: dict[str, Any]) -> Path:
    """What `lerobot-train` leaves in `pretrained_model/`: the weights and config, and both
    processor pipelines made with the dataset's stats (LeRobot 0.4.4 refuses a checkpoint
    without them)."""
    from lerobot.policies.factory import make_pre_post_processors

    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out
