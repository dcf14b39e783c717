"""The LeRobot checkpoint adapter (`--policy.type=lerobot`) against `lerobot-eval` itself.

Every checkpoint here is a tiny random-init policy saved by the test (tests/lerobot_helpers.py):
no network, no hub. The whole module is skipped where lerobot is not installed.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("gym_pusht")

from conftest import assert_same_per_episode, load_info, per_episode, run_subprocess
from lerobot_helpers import lerobot_eval_pusht, make_adapter, make_checkpoint
from rollbench.benchmarks.pusht import PushTConfig
from rollbench.policies.base import EpisodeStart

pytestmark = [pytest.mark.lerobot, pytest.mark.pusht]

EPISODES = 4
LENGTH = 30
SEED = 1000
# Every lerobot-eval command of the tests passes --eval.use_async_envs=false (0.4.4's default):
# 0.6 defaults to async envs, which crash by themselves on PushT (`NamespaceNotFound: gym_pusht`,
# the forkserver children never import gym_pusht) and with SmolVLA (`TimeLimit has no attribute
# 'task_description'`).


@pytest.fixture(scope="module")
def act_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "act", PushTConfig())


@pytest.fixture(scope="module")
def diffusion_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sampling policy (diffusion draws noise from torch's global RNG), built once for the module."""
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "diffusion", PushTConfig(), policy_type="diffusion")


@pytest.fixture(scope="module")
def diffusion_default_run(diffusion_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its run in lockstep at batch 2 with the default seeding, which two tests compare against."""
    out = tmp_path_factory.mktemp("diffusion") / "default"
    res = run_subprocess(*rollbench_args(diffusion_ckpt, out, "--eval.mode=lockstep", "--eval.batch_size=2"))
    assert res.rc == 0, res.err[-3000:]
    assert load_info(out)["mode"] == "lockstep"
    return out


def rollbench_args(ckpt: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval", "--env.type=pusht", f"--env.episode_length={LENGTH}", "--policy.type=lerobot", f"--policy.path={ckpt}",
        f"--eval.n_episodes={EPISODES}", f"--seed={SEED}", f"--output_dir={out}", *extra,
    ]


def lerobot_eval(ckpt: Path, out: Path, batch_size: int) -> list[tuple[bool, float, float]]:
    """Per-episode (success, sum_reward, max_reward) from `lerobot-eval`; episode i has seed SEED + i."""
    return lerobot_eval_pusht(ckpt, out, episodes=EPISODES, length=LENGTH, seed=SEED, batch_size=batch_size)


def ours(out: Path) -> list[tuple[bool, float, float]]:
    eps = per_episode(out)
    rows = [eps[("pusht", 0, i)] for i in range(EPISODES)]
    assert [r[4] for r in rows] == [SEED + i for i in range(EPISODES)]
    return [(r[0], r[1], r[2]) for r in rows]


def assert_same_episodes(a: list[tuple[bool, float, float]], b: list[tuple[bool, float, float]]) -> None:
    """Success bit for bit; rewards to 1e-12: the sum up to summation order (LeRobot sums a torch
    tensor), and gym-pusht's rewards differ by an ulp between processes."""
    assert [s for s, _, _ in a] == [s for s, _, _ in b]
    for (_, x, mx), (_, y, my) in zip(a, b, strict=True):
        assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12), (x, y)
        assert math.isclose(mx, my, rel_tol=1e-12, abs_tol=1e-12), (mx, my)


@pytest.mark.slow
def test_parity_with_lerobot_eval_on_pusht_pixels(act_ckpt: Path, tmp_path: Path) -> None:
    with ThreadPoolExecutor(1) as pool:  # the two tools at once: independent processes
        their_run = pool.submit(lerobot_eval, act_ckpt, tmp_path / "lerobot", batch_size=2)
        res = run_subprocess(*rollbench_args(act_ckpt, tmp_path / "lockstep", "--eval.mode=lockstep", "--eval.batch_size=2"))
        theirs = their_run.result()
    assert any(r[1] > 0 for r in theirs), "the episodes should earn some reward, or the comparison is empty"
    assert res.rc == 0, res.err[-3000:]
    assert load_info(tmp_path / "lockstep")["mode"] == "lockstep"
    assert_same_episodes(ours(tmp_path / "lockstep"), theirs)


@pytest.mark.slow
def test_continuous_equals_lockstep_at_batch_one(act_ckpt: Path, tmp_path: Path) -> None:
    """Continuous mode batches rows differently; with one row per call it is lockstep at batch 1.

    (lerobot-eval at --eval.batch_size=1 gives these same episodes, checked by hand: torch's CPU
    kernels are not bitwise batch-invariant, so batch 2 differs from batch 1 in the last digits.)
    Nor are they invariant to the number of threads: continuous mode gives the driver's torch
    the cores its workers leave, lockstep keeps torch's default, so both run with one thread
    here ($OMP_NUM_THREADS, which both honour).
    """
    a = run_subprocess(
        *rollbench_args(act_ckpt, tmp_path / "c", "--eval.mode=continuous", "--workers=2", "--slots_per_worker=1"),
        OMP_NUM_THREADS="1",
    )
    assert a.rc == 0, a.err[-3000:]
    assert load_info(tmp_path / "c")["mode"] == "continuous"
    b = run_subprocess(*rollbench_args(act_ckpt, tmp_path / "l", "--eval.mode=lockstep", "--eval.batch_size=1"), OMP_NUM_THREADS="1")
    assert b.rc == 0, b.err[-3000:]
    assert_same_episodes(ours(tmp_path / "c"), ours(tmp_path / "l"))


def _expect_config_error(cli, ckpt: Path, out: Path, *words: str) -> None:
    res = cli(*rollbench_args(ckpt, out))
    assert res.rc == 2, (res.out, res.err)
    lines = [ln for ln in res.err.strip().splitlines() if ln.startswith("rollbench:")]
    assert len(lines) == 1 and lines[0].startswith("rollbench: error:"), res.err
    assert "Traceback" not in res.err
    for w in words:
        assert w in lines[0], lines[0]
    assert not (out / "episodes").exists() and not (out / "eval_info.json").exists()


@pytest.mark.parametrize("missing", ["model.safetensors", "policy_postprocessor.json"])
def test_missing_file_fails_before_any_episode(cli, act_ckpt: Path, tmp_path: Path, missing: str) -> None:
    ckpt = Path(shutil.copytree(act_ckpt, tmp_path / "ckpt"))
    (ckpt / missing).unlink()
    _expect_config_error(cli, ckpt, tmp_path / "out", "misses", missing)


def test_wrong_features_fail_before_any_episode(cli, tmp_path: Path) -> None:
    from lerobot.configs.types import FeatureType, PolicyFeature

    aloha_state = {
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(14,)),
        "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 96, 96)),
    }
    ckpt = make_checkpoint(tmp_path / "aloha_like", PushTConfig(), inputs=aloha_state)
    _expect_config_error(cli, ckpt, tmp_path / "out", "do not match --env.type=pusht",
                         "observation.state: wants STATE[14], env gives STATE[2]", "rollbench check")


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ({"action_tokenizer_v2": "fast"}, ("unknown to lerobot", "action_tokenizer_v2", "newer LeRobot")),
        ({"type": "pi07"}, ("policy type 'pi07' is unknown", "newer LeRobot")),
    ],
)
def test_checkpoint_from_a_newer_lerobot_fails_clearly(cli, act_ckpt: Path, tmp_path: Path, edit, words) -> None:
    ckpt = Path(shutil.copytree(act_ckpt, tmp_path / "ckpt"))
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(edit)
    (ckpt / "config.json").write_text(json.dumps(cfg))
    _expect_config_error(cli, ckpt, tmp_path / "out", *words)


def test_unknown_option_is_refused_with_a_hint(cli, act_ckpt: Path, tmp_path: Path) -> None:
    res = cli(*rollbench_args(act_ckpt, tmp_path / "out"), "--policy.n_action_step=5")
    assert res.rc == 2
    assert "--policy.n_action_step" in res.err and "Did you mean --policy.n_action_steps?" in res.err


def _adapter(ckpt: Path, **options: str):
    return make_adapter(ckpt, PushTConfig(episode_length=LENGTH), **options)


def _batch(n: int, rng: np.random.Generator) -> dict:
    return {
        "observation.image": rng.integers(0, 256, (n, 96, 96, 3), dtype=np.uint8),
        "observation.state": rng.uniform(0, 512, (n, 2)),
        "task": ["push"] * n,
    }


def _start(slot: int) -> EpisodeStart:
    return EpisodeStart("pusht", "PushT-v0", "push", slot, SEED + slot)


def test_n_action_steps_override_and_per_slot_queues(act_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = _adapter(act_ckpt, n_action_steps="3")
    assert policy.per_slot_state and policy.path == "chunk" and policy.cfg.n_action_steps == 3
    calls: list[int] = []
    inner = policy.policy.predict_action_chunk
    monkeypatch.setattr(policy.policy, "predict_action_chunk", lambda b: calls.append(len(b["task"])) or inner(b))
    rng = np.random.default_rng(0)
    policy.reset([0, 1], [_start(0), _start(1)])
    for _ in range(3):
        assert policy.act(_batch(2, rng), [0, 1]).shape == (2, 2)
    assert calls == [2]  # one chunk of 3 steps for both slots
    policy.reset([1], [_start(2)])  # slot 1 starts a new episode; slot 0's queue is dry too
    policy.act(_batch(2, rng), [0, 1])
    policy.reset([1], [_start(3)])  # only slot 1 restarts: only its row is predicted
    policy.act(_batch(2, rng), [0, 1])
    assert calls == [2, 2, 1]


def test_actions_are_unnormalised_and_match_select_action(act_ckpt: Path) -> None:
    """One slot through the adapter == LeRobot's own select_action + postprocessor."""
    import torch

    from rollbench.policies.lerobot import to_policy_batch

    policy = _adapter(act_ckpt)
    rng = np.random.default_rng(1)
    policy.reset([0], [_start(0)])
    ref = copy.copy(policy.policy)
    ref.reset()
    for _ in range(12):  # crosses a chunk boundary (chunk_size 10)
        b = _batch(1, rng)
        ours_ = policy.act(b, [0])
        with torch.inference_mode():
            theirs = policy.postprocessor(ref.select_action(policy.preprocessor(to_policy_batch(b))))
        np.testing.assert_array_equal(ours_, theirs.numpy())
    assert np.abs(ours_).max() > 20  # in pixels (stats mean 256, std 100), not in normalised units


def test_shallow_copy_keeps_weights_and_gets_private_state(act_ckpt: Path) -> None:
    policy = _adapter(act_ckpt)
    twin = copy.copy(policy)
    assert twin.policy is not policy.policy
    assert next(twin.policy.parameters()) is next(policy.policy.parameters())
    rng = np.random.default_rng(2)
    policy.reset([0], [_start(0)])
    twin.reset([0], [_start(0)])
    policy.act(_batch(1, rng), [0])
    assert 0 in policy._queues and 0 not in twin._queues


def test_temporal_ensembling_keeps_one_ensembler_per_slot(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path / "act_te", PushTConfig(), temporal_ensemble_coeff=0.01, n_action_steps=1)
    policy = _adapter(ckpt)
    assert policy.path == "ensemble" and policy.per_slot_state
    rng = np.random.default_rng(3)
    policy.reset([4, 7], [_start(4), _start(7)])
    for _ in range(3):
        policy.act(_batch(2, rng), [4, 7])
    assert set(policy._ensemblers) == {4, 7}
    policy.reset([7], [_start(8)])
    assert set(policy._ensemblers) == {4}


@pytest.mark.slow
def test_a_sampling_policy_repeats_its_episodes(diffusion_ckpt: Path, diffusion_default_run: Path, tmp_path: Path) -> None:
    """Diffusion draws noise from torch's global RNG; lockstep seeds it per batch from the
    batch's episode seeds, so the same command gives the same episodes (it did not before)."""
    res = run_subprocess(*rollbench_args(diffusion_ckpt, tmp_path / "again", "--eval.mode=lockstep", "--eval.batch_size=2"))
    assert res.rc == 0, res.err[-3000:]
    assert load_info(tmp_path / "again")["mode"] == "lockstep"
    first = per_episode(diffusion_default_run)
    assert len(first) == EPISODES
    assert_same_per_episode(per_episode(tmp_path / "again"), first)


@pytest.mark.slow
def test_lerobot_eval_seeding_gives_lerobot_eval_s_sampled_episodes(diffusion_ckpt: Path, diffusion_default_run: Path,
                                                                   tmp_path: Path) -> None:
    """--policy.seeding=lerobot-eval: torch's RNG seeded once from --seed before the checkpoint
    loads, then one stream over the batches, as lerobot-eval draws it: a sampling policy's
    episodes equal lerobot-eval's at the same batch size. The default (noise from each
    episode's seed) gives other draws, which shows the comparison can tell them apart."""
    ckpt = diffusion_ckpt
    with ThreadPoolExecutor(1) as pool:  # the two tools at once: independent processes
        their_run = pool.submit(lerobot_eval, ckpt, tmp_path / "lerobot", batch_size=2)
        res = run_subprocess(*rollbench_args(ckpt, tmp_path / "seeded", "--policy.seeding=lerobot-eval",
                                             "--eval.batch_size=2"))
        theirs = their_run.result()
    assert res.rc == 0, res.err[-3000:]
    info = load_info(tmp_path / "seeded")
    assert info["mode"] == "lockstep" and info["config"]["policy"]["seeding"] == "lerobot-eval"
    assert_same_episodes(ours(tmp_path / "seeded"), theirs)
    assert [r[1] for r in ours(diffusion_default_run)] != [r[1] for r in theirs]


def test_lerobot_eval_seeding_is_for_lerobot_checkpoints(cli, tmp_path: Path) -> None:
    res = cli("eval", "--env.type=fake", "--policy.type=random", "--policy.seeding=lerobot-eval", f"--output_dir={tmp_path}")
    assert res.rc == 2 and "--policy.seeding=lerobot-eval is for LeRobot checkpoints" in res.err


def test_a_lerobot_eval_command_line_needs_no_policy_type(cli, act_ckpt: Path, tmp_path: Path) -> None:
    """`lerobot-eval --policy.path=CKPT ...` with `rollbench` in front: the path implies a
    LeRobot checkpoint, with the same episodes as --policy.type=lerobot."""
    typed = cli(*rollbench_args(act_ckpt, tmp_path / "typed", "--eval.mode=lockstep", "--eval.batch_size=2"))
    assert typed.rc == 0, typed.err[-2000:]
    args = [a for a in rollbench_args(act_ckpt, tmp_path / "bare", "--eval.mode=lockstep", "--eval.batch_size=2")
            if a != "--policy.type=lerobot"]
    bare = cli(*args)
    assert bare.rc == 0, bare.err[-2000:]
    assert load_info(tmp_path / "bare")["config"]["policy"]["type"] == "lerobot"
    assert per_episode(tmp_path / "bare") == per_episode(tmp_path / "typed")
