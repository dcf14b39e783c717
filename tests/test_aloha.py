"""ALOHA (gym-aloha) through the real CLI: one task, both schedulers, keys, bad flags."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gym_aloha")

from conftest import gl_in_this_process, load_info, per_episode
from rollbench.benchmarks.aloha import AlohaConfig

pytestmark = [pytest.mark.aloha, pytest.mark.slow]

BASE = (
    "eval", "--env.type=aloha", "--env.task=AlohaTransferCube-v0",
    "--env.episode_length=10",
)


def test_transfer_cube_lockstep_equals_continuous(cli, tmp_path):
    """Random policy, 2 episodes: identical per-episode results in both modes."""
    a = cli(*BASE, "--env.obs_type=pixels", "--eval.n_episodes=2", "--policy.type=random", "--eval.mode=lockstep", f"--output_dir={tmp_path / 'a'}")
    assert a.rc == 0, a.err
    b = cli(*BASE, "--env.obs_type=pixels", "--eval.n_episodes=2", "--policy.type=random", "--eval.mode=continuous", "--workers=2",
            f"--output_dir={tmp_path / 'b'}")
    assert b.rc == 0, b.err
    ea, eb = per_episode(tmp_path / "a"), per_episode(tmp_path / "b")
    assert ea == eb
    assert sorted(ea) == [("aloha", 0, 0), ("aloha", 0, 1)]
    assert all(v[3] == 10 for v in ea.values())  # cut at --env.episode_length
    assert load_info(tmp_path / "a")["per_task"][0]["task"] == "AlohaTransferCube-v0"


@pytest.mark.parametrize("obs_type", ["pixels", "pixels_agent_pos"])
def test_batch_keys_and_shapes(cli, tmp_path, obs_type):
    """pixels: observation.images.top (480x640 uint8) only; pixels_agent_pos: + observation.state (14)."""
    r = cli(*BASE, f"--env.obs_type={obs_type}", "--eval.n_episodes=1", "--policy.type=module",
            f"--policy.path=helpers_image_policies:aloha_{obs_type}", "--eval.mode=lockstep", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    # the policy checked every batch of the episode (it raises on a wrong key, shape or dtype)
    assert [v[3] for v in per_episode(tmp_path).values()] == [10]


def test_batch_key_check_catches_a_wrong_layout(cli, tmp_path):
    """The checking policy of `pixels` on `pixels_agent_pos` batches: the extra state key fails the run."""
    r = cli(*BASE, "--env.obs_type=pixels_agent_pos", "--eval.n_episodes=1", "--policy.type=module",
            "--policy.path=helpers_image_policies:aloha_pixels", "--eval.mode=lockstep", f"--output_dir={tmp_path}")
    assert r.rc != 0
    assert "features" in r.err and "observation.state" in r.err


def test_only_the_used_camera_is_rendered(monkeypatch):
    """gym-aloha's task would render top, angle and front_close; the lean env renders top only."""
    gl_in_this_process()
    cfg = AlohaConfig(task="AlohaTransferCube-v0", obs_type="pixels_agent_pos", observation_height=48, observation_width=64)
    env = cfg.make_task_env("AlohaTransferCube-v0")
    assert env._env is None  # nothing built before the first reset
    try:
        obs, _ = env.reset(seed=3)
        physics = env._env._env.physics
        cameras: list[object] = []
        render = type(physics).render

        def spy(self, *args, **kwargs):
            cameras.append(kwargs.get("camera_id"))
            return render(self, *args, **kwargs)

        monkeypatch.setattr(type(physics), "render", spy)
        obs, _, _, _, _ = env.step(np.zeros(14, np.float32))
        assert cameras == ["top"]
        assert set(obs) == {"top", "agent_pos"} and obs["top"].shape == (48, 64, 3)
        assert env.render() is obs["top"]  # videos reuse the frame
    finally:
        env.close()


def test_state_obs_renders_nothing(monkeypatch):
    cfg = AlohaConfig(task="AlohaInsertion-v0", obs_type="state")
    env = cfg.make_task_env("AlohaInsertion-v0")
    try:
        obs, _ = env.reset(seed=0)
        physics = type(env._env._env.physics)
        monkeypatch.setattr(physics, "render", lambda *a, **k: pytest.fail("state observations must not render"))
        obs, _, _, _, _ = env.step(np.zeros(14, np.float32))
        assert obs["agent_pos"].shape == (14,) and obs["environment_state"].shape == (14,)
        assert cfg.features["observation.environment_state"].shape == (14,)
    finally:
        env.close()


@pytest.mark.parametrize(
    "flag, needle",
    [
        ("--env.task=AlohaTransfer-v0", "Did you mean 'AlohaTransferCube-v0'"),
        ("--env.obs_type=rgb", "--env.obs_type='rgb' is not allowed"),
        ("--env.episode_length=0", "--env.episode_length=0"),
    ],
)
def test_bad_flags_are_one_line_errors(cli, tmp_path, flag, needle):
    r = cli("eval", "--env.type=aloha", flag, "--policy.type=random", f"--output_dir={tmp_path}")
    assert r.rc == 2
    assert needle in r.err
    assert len(r.err.strip().splitlines()) == 1, r.err
