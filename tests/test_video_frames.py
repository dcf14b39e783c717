"""Cheap videos: frames for people at --eval.video_size with fast settings, never at the
expense of what the policy sees; the warning before a run whose videos cost much of it; the
new flags' errors."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, gl_in_this_process, per_episode, subprocess_env
from rollbench.config.eval import EvalConfig
from rollbench.config.policy import PolicyConfig
from rollbench.config.run import RunConfig
from rollbench.plan import make_plan
from test_cli import assert_one_line_error

WARNING = "WARNING: videos will cost about"


@pytest.fixture
def gl() -> None:
    gl_in_this_process()


def _metaworld_env(**fields):
    from rollbench.benchmarks.metaworld import MetaWorldConfig

    bench = MetaWorldConfig(task="push-v3", **fields)
    return bench.make_task_env("push-v3")


# -- the frames --------------------------------------------------------------------------
def _fast_frame(env) -> np.ndarray:
    """The env's own frame (`--env.render_quality=fast`: no multisampling, no cast shadows)
    with reflections off in its viewer's scene too: the video camera's settings, by another path."""
    import mujoco

    env.render()  # makes the viewer
    env.unwrapped._env.mujoco_renderer.viewer.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
    env.unwrapped._frame = None
    return env.render()


@pytest.mark.metaworld
def test_metaworld_state_video_frames_are_fast_at_their_size_and_leave_the_policys_frames_alone(gl):
    """A state env's video frame has the video size (the observation's aspect) and equals, bit
    for bit, the env's own frame at that size without multisampling, shadows or reflections;
    the env's own frames keep all three, whether rendered before or after a video frame."""
    filmed = _metaworld_env(observation_width=80, observation_height=60)  # default quality
    fresh = _metaworld_env(observation_width=80, observation_height=60)  # never filmed
    fast = _metaworld_env(observation_width=96, observation_height=72, render_quality="fast")
    fast_small = _metaworld_env(observation_width=80, observation_height=60, render_quality="fast")
    envs = [filmed, fresh, fast, fast_small]
    try:
        for env in envs:
            env.reset(seed=3)
        quality = filmed.unwrapped._env.model.vis.quality
        before = (quality.offsamples, quality.shadowsize)
        for _ in range(2):
            frame = filmed.render_video(96)  # first: the camera is made before the env's own viewer
            assert frame.shape == (72, 96, 3) and frame.dtype == np.uint8
            assert np.array_equal(frame, _fast_frame(fast))
            own = filmed.render()
            assert np.array_equal(own, fresh.render())  # what a policy would see: unchanged
            assert not np.array_equal(own, fast_small.render())  # ... and not the fast settings
            assert (quality.offsamples, quality.shadowsize) == before
            for env in envs:
                env.step(np.array([0.5, 0.2, -0.3, 1.0], dtype=np.float32))
        assert not np.array_equal(filmed.render_video(96), frame)  # a new state, a new frame
    finally:
        for env in envs:
            env.close()


@pytest.mark.metaworld
def test_metaworld_pixel_video_frame_is_the_observation(gl):
    """With pixel observations the video frame is the policy's own frame of the step (its
    size and settings, whatever --eval.video_size), rendered once."""
    env = _metaworld_env(obs_type="pixels_agent_pos", observation_width=48, observation_height=48)
    inner = env.unwrapped
    renders = []
    real = inner._render
    inner._render = lambda: renders.append(1) or real()
    try:
        obs, _ = env.reset(seed=1)
        assert np.array_equal(env.render_video(256), obs["pixels"]) and len(renders) == 1
        obs, *_ = env.step(np.zeros(4, dtype=np.float32))
        assert np.array_equal(env.render_video(256), obs["pixels"]) and len(renders) == 2
        assert inner._video is None  # no renderer of its own
    finally:
        env.close()


@pytest.mark.metaworld
@pytest.mark.parametrize("mode", [[], ["--eval.mode=lockstep", "--eval.batch_size=2"]], ids=["continuous", "lockstep"])
def test_metaworld_pixel_policy_sees_the_same_with_videos_on_and_off(cli, tmp_path, mode):
    """A policy driven by its pixels alone has bit-identical episodes with videos on and off;
    the same policy on fast-rendered pixels does not (so the comparison would see a leak)."""
    base = ["eval", "--env.type=metaworld", "--env.task=reach-v3", "--env.obs_type=pixels_agent_pos",
            "--env.observation_width=48", "--env.observation_height=48", "--env.episode_length=12",
            "--policy.type=module", "--policy.path=helpers_video_policies:pixel_driven", "--eval.n_episodes=2", *mode]
    on = cli(*base, "--eval.max_episodes_rendered=2", "--eval.video_size=128", f"--output_dir={tmp_path / 'on'}")
    assert on.rc == 0, on.err
    off = cli(*base, "--eval.max_episodes_rendered=0", f"--output_dir={tmp_path / 'off'}")
    assert off.rc == 0, off.err
    assert per_episode(tmp_path / "on") == per_episode(tmp_path / "off")
    assert len(list((tmp_path / "on").glob("videos/**/*.mp4"))) == 2
    if not mode:
        fast = cli(*base, "--env.render_quality=fast", f"--output_dir={tmp_path / 'fast'}")
        assert fast.rc == 0, fast.err
        assert per_episode(tmp_path / "fast") != per_episode(tmp_path / "off")


@pytest.mark.metaworld
def test_lockstep_films_state_episodes_in_the_driver_with_no_mujoco_gl_set(tmp_path):
    """Lockstep renders in the driver, which imports MuJoCo (checking the tasks) before the run
    sets MUJOCO_GL: the video camera picks its GL backend when it is made, not at that import."""
    env = {k: v for k, v in subprocess_env().items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    proc = subprocess.run(
        [sys.executable, "-m", "rollbench", "eval", "--env.type=metaworld", "--env.task=reach-v3",
         "--env.episode_length=9", "--policy.type=random", "--eval.n_episodes=1", "--eval.mode=lockstep",
         "--eval.max_episodes_rendered=1", "--eval.report=false", f"--output_dir={tmp_path}"],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no video" not in proc.stderr, proc.stderr
    from test_videos import decoded

    n_frames, shape, _ = decoded(tmp_path / "videos" / "reach-v3_0" / "episode_0.mp4")
    assert (n_frames, shape) == (1 + math.ceil(9 / 8), (256, 256))


@pytest.mark.aloha
def test_aloha_video_frames_and_the_policys_frames_beside_them(gl, monkeypatch):
    """State observations: a `top` frame of its own at the video size, equal to dm_control's
    frame of that size without multisampling, shadows or reflections, and the env's physics
    renders nothing; pixel observations: the observation's frame. A pixel env's own frames
    stay right around video frames of other envs in the thread: dm_control does not make its
    context current again when it thinks it still is, so a camera must hand it back."""
    from rollbench.benchmarks.aloha import AlohaTaskEnv

    other = _tiny_camera()  # a camera of another model first: the GL names differ from dm_control's
    state = AlohaTaskEnv("AlohaTransferCube-v0", "state", 480, 640)
    pixels = AlohaTaskEnv("AlohaTransferCube-v0", "pixels_agent_pos", 192, 256, fast_render=True)
    try:
        state.reset(seed=2)
        obs, _ = pixels.reset(seed=2)
        physics = state._env._env.physics
        monkeypatch.setattr(physics, "render", lambda *a, **k: pytest.fail("the env's own physics must not render"))
        frame = state.render_video(256)
        assert frame.shape == (192, 256, 3)
        fast = pixels._env._env.physics  # --env.fast_render: no multisampling, no cast shadows
        for _ in range(2):  # the policy's frame of this state, again, after a video frame
            assert np.array_equal(fast.render(height=192, width=256, camera_id="top"), obs["top"])
        assert np.array_equal(frame, fast.render(height=192, width=256, camera_id="top",
                                                 render_flag_overrides={"reflection": False}))
        assert pixels.render_video(64) is obs["top"]
    finally:
        for env in (other, state, pixels):
            env.close()


def _tiny_camera():
    import mujoco

    from rollbench.benchmarks.frames import MujocoVideoCamera

    model = mujoco.MjModel.from_xml_string(
        "<mujoco><asset><texture name='t' type='2d' builtin='checker' width='256' height='256'/>"
        "<material name='m' texture='t'/></asset><worldbody><camera name='c' pos='0 0 2'/>"
        "<geom type='box' size='.5 .5 .1' material='m'/></worldbody></mujoco>"
    )
    camera = MujocoVideoCamera(model, "c", 64, 64)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    assert camera.render(data).any()
    return camera


def test_frame_shape_keeps_the_aspect_with_even_sides():
    from rollbench.benchmarks.frames import frame_shape

    assert frame_shape(256, 480, 480) == (256, 256)
    assert frame_shape(256, 640, 480) == (256, 192)
    assert frame_shape(256, 480, 640) == (192, 256)
    assert frame_shape(100, 333, 101) == (100, 30)
    assert frame_shape(16, 10, 1000) == (2, 16)


# -- the warning -------------------------------------------------------------------------
def _fake_cfg(**eval_fields) -> RunConfig:
    from rollbench.benchmarks.fake import FakeConfig

    return RunConfig(env=FakeConfig(task="near"), policy=PolicyConfig(type="random"), eval=EvalConfig(**eval_fields))


def test_estimate_counts_the_frames_the_plan_takes():
    """Every unit at its step limit (fake: 20 steps, 30 fps); the first K of each task filmed:
    the reset, every k-th step (k = 30 // video_fps) and the last."""
    from rollbench.results.video_cost import ENCODE_MS_PER_MPIXEL, estimate

    cfg = _fake_cfg(n_episodes=5, max_episodes_rendered=2, video_fps=4, video_size=64)  # k = 7
    cost = estimate(cfg, make_plan(cfg.env.tasks(), 5, 0))
    assert cost is not None
    assert cost.filmed == 2 and cost.frames == 2 * (1 + math.ceil(20 / 7))
    assert cost.frame_ms == pytest.approx(0.01 + ENCODE_MS_PER_MPIXEL * 64 * 64 / 1e6)
    assert cost.eval_s == pytest.approx(5 * 20 * 0.02 / 1000)
    assert cost.share == pytest.approx(cost.video_s / (cost.video_s + cost.eval_s))
    assert estimate(_fake_cfg(max_episodes_rendered=0), make_plan(cfg.env.tasks(), 5, 0)) is None


@pytest.mark.parametrize(
    ("flags", "warned"),
    [
        (["--eval.n_episodes=2", "--eval.max_episodes_rendered=2"], True),  # every episode filmed
        (["--eval.n_episodes=2", "--eval.max_episodes_rendered=0"], False),  # no videos
        # few episodes filmed, few frames each: a small share of the run
        (["--eval.n_episodes=40", "--eval.max_episodes_rendered=1", "--eval.video_fps=1"], False),
    ],
    ids=["costly", "off", "small-share"],
)
def test_cost_warning_before_a_fake_run(cli, tmp_path, flags, warned):
    r = cli("eval", "--env.type=fake", "--env.task=near", "--policy.type=random", *flags, f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    lines = [ln for ln in r.err.splitlines() if ln.startswith(WARNING)]
    assert len(lines) == (1 if warned else 0), r.err
    if warned:
        assert "--eval.max_episodes_rendered=0 turns them off" in lines[0]
        assert "2 episodes filmed" in lines[0]


@pytest.mark.metaworld
@pytest.mark.parametrize(("obs", "warned"), [("state", True), ("pixels_agent_pos", False)])
def test_cost_warning_before_a_metaworld_run(cli, tmp_path, obs, warned):
    """State observations: every video frame is a render of its own (~18 ms against a 0.5 ms
    step), said before the run; pixel observations reuse the policy's frames: nothing to say."""
    r = cli("eval", "--env.type=metaworld", "--env.task=reach-v3", f"--env.obs_type={obs}",
            "--env.observation_width=32", "--env.observation_height=32", "--env.episode_length=3",
            "--policy.type=random", "--eval.n_episodes=1", "--eval.max_episodes_rendered=1", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert any(ln.startswith(WARNING) for ln in r.err.splitlines()) == warned, r.err


# -- the flags ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flag", "needles"),
    [
        ("--eval.video_size=8", ["--eval.video_size=8 is not allowed", "16..4096"]),
        ("--eval.video_size=5000", ["--eval.video_size=5000 is not allowed", "16..4096"]),
        ("--eval.video_size=big", ["--eval.video_size", "big"]),
        ("--eval.video_fps=0", ["--eval.video_fps=0 is not allowed", ">= 1", "--eval.max_episodes_rendered=0"]),
        ("--eval.video_fps=-2", ["--eval.video_fps=-2 is not allowed", ">= 1"]),
        ("--eval.video_fps=2.5", ["--eval.video_fps", "2.5"]),
    ],
)
def test_bad_video_flags_are_one_line_errors(cli, tmp_path, flag, needles):
    res = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.max_episodes_rendered=1", flag,
              f"--output_dir={tmp_path}")
    assert_one_line_error(res, *needles)
    assert not (tmp_path / "eval_info.json").exists()
