"""Episode videos: written in the background, readable; a frame after the reset, after every
k-th step (k = the benchmark's fps // --eval.video_fps, at least 1) and after the last step,
so an episode of n steps has 1 + ceil(n / k) frames (n + 1 when k = 1), played at fps / k."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import load_info, per_episode

av = pytest.importorskip("av")

FAKE_FPS = 30  # the fake benchmark's (BenchmarkConfig.fps default)


def decoded(path: Path) -> tuple[int, tuple[int, int], Fraction]:
    """(frames, (height, width), frames per second) of a video file."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f for f in container.decode(video=0)]
        return len(frames), (frames[0].height, frames[0].width), Fraction(stream.average_rate)


def check_videos(out: Path, rendered: int, n_episodes: int, every: int = 1, fps: int = FAKE_FPS,
                 shape: tuple[int, int] | None = None) -> int:
    info = load_info(out)
    checked = 0
    for task in info["per_task"]:
        m = task["metrics"]
        want = [f"videos/{task['task_group']}_{task['task_id']}/episode_{i}.mp4" for i in range(min(rendered, n_episodes))]
        assert m["video_paths"] == want
        for rel in want:
            i = int(rel.rsplit("_", 1)[1].split(".")[0])
            n_frames, hw, rate = decoded(out / rel)
            assert n_frames == 1 + math.ceil(m["n_steps"][m["episode_ix"].index(i)] / every)
            assert rate == Fraction(fps, every)  # real time
            assert shape is None or hw == shape
            checked += 1
    assert info["overall"]["video_paths"] == [p for t in info["per_task"] for p in t["metrics"]["video_paths"]]
    assert not list(out.glob("videos/**/.*.tmp.mp4"))  # no partial files left
    return checked


@pytest.mark.parametrize(
    "mode",
    [
        ["--eval.mode=continuous", "--workers=2"],
        ["--eval.mode=continuous", "--workers=2", "--policy.placement=driver", "--slots_per_worker=2"],
        ["--eval.mode=lockstep", "--eval.batch_size=2"],
        ["--eval.mode=lockstep", "--eval.batch_size=2", "--eval.isolation=none"],
        ["--eval.mode=lockstep", "--eval.batch_size=2", "--eval.isolation=none", "--eval.use_async_envs=true"],
    ],
    ids=["continuous-worker", "continuous-driver", "lockstep", "lockstep-here", "lockstep-async"],
)
@pytest.mark.parametrize(
    ("video_fps", "every"), [(None, 3), (FAKE_FPS, 1), (7, 4)], ids=["default-10fps", "every-step", "7fps"]
)
def test_fake_videos_every_mode(cli, tmp_path: Path, mode: list[str], video_fps: int | None, every: int) -> None:
    fps_flag = [f"--eval.video_fps={video_fps}"] if video_fps is not None else []  # default 10: 30 fps // 10
    r = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=3",
            "--eval.max_episodes_rendered=2", *fps_flag, *mode, f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert check_videos(tmp_path, 2, 3, every=every) == 6


def test_zero_renders_nothing(cli, tmp_path: Path) -> None:
    r = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=2",
            "--eval.max_episodes_rendered=0", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert not (tmp_path / "videos").exists()
    assert all(t["metrics"]["video_paths"] == [] for t in load_info(tmp_path)["per_task"])


def test_videos_do_not_change_results(cli, tmp_path: Path) -> None:
    base = ["eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=4"]
    assert cli(*base, "--eval.max_episodes_rendered=4", f"--output_dir={tmp_path / 'a'}").rc == 0
    assert cli(*base, "--eval.max_episodes_rendered=0", f"--output_dir={tmp_path / 'b'}").rc == 0
    assert per_episode(tmp_path / "a") == per_episode(tmp_path / "b")


@pytest.mark.metaworld
@pytest.mark.parametrize(
    ("obs", "shape", "mode"),
    [
        ("state", (96, 96), []),
        ("pixels_agent_pos", (64, 64), []),
        ("state", (96, 96), ["--eval.mode=lockstep", "--eval.batch_size=2"]),
        ("state", (96, 96), ["--eval.mode=lockstep", "--eval.batch_size=2", "--eval.isolation=none",
                             "--eval.use_async_envs=true"]),
    ],
    ids=["state", "pixels", "state-lockstep", "state-lockstep-async"],
)
def test_metaworld_videos(cli, tmp_path: Path, obs: str, shape: tuple[int, int], mode: list[str]) -> None:
    """State observations: frames of their own at --eval.video_size (also from an async
    lockstep batch's sub-processes); pixel observations: the observation's frames, at the
    observation's size. MetaWorld runs at 80 fps: every 8th step is filmed."""
    r = cli("eval", "--env.type=metaworld", "--env.task=reach-v3", f"--env.obs_type={obs}",
            "--env.observation_width=64", "--env.observation_height=64", "--env.episode_length=17",
            "--eval.video_size=96", "--policy.type=random", "--eval.n_episodes=2", "--eval.max_episodes_rendered=1",
            *mode, f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert check_videos(tmp_path, 1, 2, every=8, fps=80, shape=shape) == 1


@pytest.mark.pusht
def test_pusht_videos(cli, tmp_path: Path) -> None:
    r = cli("eval", "--env.type=pusht", "--env.episode_length=10", "--policy.type=random", "--eval.n_episodes=2",
            "--eval.max_episodes_rendered=2", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    # PushT runs at 10 fps: every step is filmed, drawn at --env.visualization_width x _height
    assert check_videos(tmp_path, 2, 2, every=1, fps=10, shape=(384, 384)) == 2


def test_bad_value(cli, tmp_path: Path) -> None:
    r = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.max_episodes_rendered=-1", f"--output_dir={tmp_path}")
    assert r.rc == 2 and "--eval.max_episodes_rendered=-1" in r.err


def _film_in_async_envs(cli, tmp_path: Path):
    """A lockstep batch of 2 MetaWorld envs in forkserver sub-processes, the first episode filmed."""
    return cli("eval", "--env.type=metaworld", "--env.task=reach-v3", "--env.episode_length=9",
               "--eval.video_size=64", "--policy.type=random", "--eval.n_episodes=2", "--eval.max_episodes_rendered=1",
               "--eval.mode=lockstep", "--eval.batch_size=2", "--eval.isolation=none", "--eval.use_async_envs=true",
               f"--output_dir={tmp_path}")


@pytest.mark.metaworld
def test_async_envs_render_with_the_run_s_backend_not_the_forkserver_s(cli, tmp_path: Path, monkeypatch) -> None:
    """`--eval.use_async_envs` steps envs in processes from multiprocessing's forkserver, which
    keeps the environment of the moment it started (an earlier evaluation in this process,
    another library). A forkserver started under MUJOCO_GL=glfw (no display here) does not
    decide how this run renders: each sub-process takes the run's backend itself."""
    from multiprocessing import forkserver, get_context

    server = forkserver._forkserver
    if not hasattr(server, "_stop"):
        pytest.skip("this Python's forkserver cannot be restarted by a test (no private _stop)")
    server._stop()
    try:
        monkeypatch.setenv("MUJOCO_GL", "glfw")
        monkeypatch.setenv("PYOPENGL_PLATFORM", "glfw")
        started = get_context("forkserver").Process(target=int)
        started.start()  # the forkserver starts now, with glfw in its environment
        started.join()
        monkeypatch.delenv("MUJOCO_GL")
        monkeypatch.delenv("PYOPENGL_PLATFORM")
        r = _film_in_async_envs(cli, tmp_path)
        assert r.rc == 0, r.err
        assert check_videos(tmp_path, 1, 2, every=8, fps=80, shape=(64, 64)) == 1
    finally:
        server._stop()  # later tests start their own, with their environment


@pytest.mark.metaworld
def test_an_async_env_that_cannot_film_stops_the_run_saying_why(cli, tmp_path: Path, monkeypatch) -> None:
    """A sub-process of `--eval.use_async_envs` that fails to render a video frame is shut down
    by gymnasium, so the batch cannot step on: the run stops at once with the render's error
    and the GL hint, not at the next step with "'NoneType' object has no attribute 'send'"."""
    from test_cli import run_error_line

    monkeypatch.setenv("MUJOCO_GL", "glfw")  # the user's choice wins; glfw has no display here
    monkeypatch.setenv("PYOPENGL_PLATFORM", "glfw")
    monkeypatch.setenv("DISPLAY", ":99")  # none there: with DISPLAY unset the run is refused before it starts
    r = _film_in_async_envs(cli, tmp_path)
    assert r.rc != 0
    line = run_error_line(r)
    assert "failed to film reach-v3's video" in line and "MUJOCO_GL=glfw" in line and "needs a display" in line, line
    assert "NoneType" not in r.err
