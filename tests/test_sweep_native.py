"""Native --eval.perturb axes (cameras, lights and objects moved inside MetaWorld's and LIBERO's
simulators): what the policy sees changes, the control's reset stays what it was without a
sweep, a level is undone at the next reset, and a perturbed episode is a function of
(condition, task, i) whatever runs it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import gl_in_this_process, per_episode, run_subprocess
from rollbench import perturb
from rollbench.benchmarks.libero import LiberoConfig
from rollbench.benchmarks.metaworld import MetaWorldConfig
from rollbench.errors import ConfigError
from test_cli import assert_one_line_error
from test_sweep import every_episode

# not importorskip: importing metaworld imports MuJoCo, which must come after MUJOCO_GL is set
needs_metaworld = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None, reason="needs metaworld")
NATIVE = ("camera.shift=0.05", "camera.rotate=10", "light.intensity=0.5", "object.shift=0.05")


def test_native_axes_parse_like_the_others_and_are_refused_where_no_simulator_applies_them(cli, tmp_path: Path) -> None:
    conds = perturb.parse("camera.shift=0,0.05;light.intensity=1,0.5;action.noise=0.1")
    assert [c.id for c in conds] == ["", "camera.shift=0.05", "light.intensity=0.5", "action.noise=0.1"]
    assert [c.policy_side for c in conds] == [False, False, False, True]  # the Perturber leaves native axes alone
    assert conds[2].native_levels == {"light.intensity": 0.5} and conds[3].native_levels == {}
    for bench in (MetaWorldConfig, LiberoConfig):  # what the error names is what the benchmarks declare
        assert bench.native_axes == {name for name, axis in perturb.AXES.items() if bench.type_name in axis.native}
    with pytest.raises(ConfigError, match=r"object.shift takes numbers from 0 to 0.5"):
        perturb.parse("object.shift=2")
    out = tmp_path / "fake"
    res = cli("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=1",
              "--eval.perturb=action.noise=0.1;camera.shift=0.05", f"--output_dir={out}")
    assert_one_line_error(res, "camera.shift is applied inside the simulator", "--env.type=fake",
                          "benchmarks that apply it: metaworld, libero")
    assert not (out / "episodes").exists()


def _pixels(env: Any, cid: str, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(the first frame, the object's position) of a reset under `cid`."""
    env.native_condition = cid
    obs, _ = env.reset(seed=seed)
    return obs["pixels"], env.unwrapped._env.data.qpos[9:12].copy()


@pytest.mark.metaworld
@needs_metaworld
def test_metaworld_native_levels_change_the_frame_and_are_undone_at_the_next_reset() -> None:
    gl_in_this_process()
    bench = MetaWorldConfig(task="push-v3", obs_type="pixels_agent_pos", observation_width=48, observation_height=48)
    env, fresh = bench.make_task_env("push-v3"), bench.make_task_env("push-v3")
    try:
        control, at = _pixels(env, "")
        for cid in NATIVE:
            frame, pos = _pixels(env, cid)
            assert not np.array_equal(frame, control), cid
            moved = pos - at
            if cid.startswith("object"):  # on the table, this far
                assert moved[2] == 0 and np.hypot(*moved[:2]) == pytest.approx(0.05, abs=1e-9)
            else:
                assert not moved.any(), cid
            again, pos = _pixels(env, "")  # undone: bit for bit the control's reset
            assert np.array_equal(again, control) and np.array_equal(pos, at), cid
        # an env that never ran a condition: the same control, and the same draws under one
        assert np.array_equal(_pixels(fresh, "")[0], control)
        shifted = _pixels(fresh, "camera.shift=0.05")[0]
        assert np.array_equal(shifted, _pixels(env, "camera.shift=0.05")[0])
        assert not np.array_equal(shifted, _pixels(env, "camera.shift=0.05", seed=4)[0])  # drawn per episode
    finally:
        env.close()
        fresh.close()
    door = MetaWorldConfig(task="door-open-v3").make_task_env("door-open-v3")
    try:  # no free object, only fixtures: object.shift leaves the reset as it was
        states = []
        for cid in ("", "object.shift=0.05"):
            door.native_condition = cid
            states.append(door.reset(seed=3)[0]["environment_state"])
        assert np.array_equal(*states)
    finally:
        door.close()


@pytest.mark.metaworld
@pytest.mark.slow
@needs_metaworld
def test_a_native_sweep_is_the_same_whatever_runs_it_and_its_control_is_a_plain_run(tmp_path: Path) -> None:
    # a policy that acts on the image's colours: any pixel that changes changes its rewards
    base = ("eval", "--env.type=metaworld", "--env.task=push-v3", "--env.obs_type=pixels_agent_pos",
            "--env.observation_width=32", "--env.observation_height=32",
            "--env.episode_length=4", "--policy.type=module", "--policy.path=helpers_video_policies:pixel_driven",
            "--eval.n_episodes=2")
    sweep = f"--eval.perturb={';'.join(NATIVE)}"
    ways = {  # env workers (one, two), and a gymnasium vector env in this process (lockstep's other path)
        "worker": ("--workers=1",),
        "driver": ("--workers=2", "--policy.placement=driver"),
        "in_process": ("--eval.mode=lockstep", "--eval.isolation=none", "--eval.batch_size=4"),
    }
    got = {}
    for name, flags in ways.items():
        res = run_subprocess(*base, sweep, *flags, f"--output_dir={tmp_path / name}")
        assert res.rc == 0, (name, res.err)
        got[name] = every_episode(tmp_path / name)
    first = got["worker"]
    assert len(first) == 2 * (1 + len(NATIVE))
    for name, episodes in got.items():
        assert episodes == first, name
    plain = tmp_path / "plain"
    assert run_subprocess(*base, "--workers=1", f"--output_dir={plain}").rc == 0
    assert per_episode(tmp_path / "worker") == per_episode(plain)
    control = sorted(r[3] for r in first.values() if r[0] == "")
    for cid in NATIVE:  # the policy saw every condition's change
        assert sorted(r[3] for r in first.values() if r[0] == cid) != control, cid


@pytest.mark.libero
@pytest.mark.slow
def test_libero_native_levels_move_both_cameras_and_the_objects_and_are_undone() -> None:
    pytest.importorskip("libero")
    from rollbench.benchmarks.libero import find_assets

    if find_assets(None) is None:
        pytest.skip("no LIBERO assets installed")
    gl_in_this_process()
    import mujoco

    bench = LiberoConfig(task="libero_spatial", task_ids=("0",), observation_width=48, observation_height=48)
    env = bench.make_task_env(bench.tasks()["libero_spatial"][0])

    def reset(cid: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
        env.native_condition, env.episode_index = cid, 0
        obs, _ = env.reset(seed=3)
        model, data = env._env.sim.model._model, env._env.sim.data._data
        bowl = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "akita_black_bowl_1_joint0")
        return obs, data.qpos[model.jnt_qposadr[bowl]:][:3].copy()

    try:
        control, at = reset("")
        perturbed, pos = reset("camera.shift=0.05&object.shift=0.05")  # one condition, two axes
        for cam in ("pixels/image", "pixels/image2"):
            assert not np.array_equal(perturbed[cam], control[cam]), cam
        # moved on the table (before the 10 settling steps, which may move it a little further)
        assert np.hypot(*(pos - at)[:2]) == pytest.approx(0.05, abs=0.01)
        again, pos = reset("")
        assert all(np.array_equal(again[k], control[k]) for k in control) and np.array_equal(pos, at)
    finally:
        env.close()
