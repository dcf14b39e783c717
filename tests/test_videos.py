"""Episode videos: written in the background, readable, one frame per step plus the reset."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_info, per_episode

av = pytest.importorskip("av")


def decoded_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def check_videos(out: Path, rendered: int, n_episodes: int) -> int:
    info = load_info(out)
    checked = 0
    for task in info["per_task"]:
        m = task["metrics"]
        want = [f"videos/{task['task_group']}_{task['task_id']}/episode_{i}.mp4" for i in range(min(rendered, n_episodes))]
        assert m["video_paths"] == want
        for rel in want:
            i = int(rel.rsplit("_", 1)[1].split(".")[0])
            assert decoded_frames(out / rel) == m["n_steps"][m["episode_ix"].index(i)] + 1
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
        ["--eval.mode=lockstep", "--eval.batch_size=2", "--eval.use_async_envs=true"],
    ],
    ids=["continuous-worker", "continuous-driver", "lockstep", "lockstep-async"],
)
def test_fake_videos_every_mode(cli, tmp_path: Path, mode: list[str]) -> None:
    r = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=3",
            "--eval.max_episodes_rendered=2", *mode, f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert check_videos(tmp_path, 2, 3) == 6


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
@pytest.mark.parametrize("obs", ["state", "pixels_agent_pos"])
def test_metaworld_videos(cli, tmp_path: Path, obs: str) -> None:
    r = cli("eval", "--env.type=metaworld", "--env.task=reach-v3", f"--env.obs_type={obs}",
            "--env.observation_width=64", "--env.observation_height=64", "--env.episode_length=8",
            "--policy.type=random", "--eval.n_episodes=2", "--eval.max_episodes_rendered=1", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert check_videos(tmp_path, 1, 2) == 1


@pytest.mark.pusht
def test_pusht_videos(cli, tmp_path: Path) -> None:
    r = cli("eval", "--env.type=pusht", "--env.episode_length=10", "--policy.type=random", "--eval.n_episodes=2",
            "--eval.max_episodes_rendered=2", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert check_videos(tmp_path, 2, 2) == 2


def test_bad_value(cli, tmp_path: Path) -> None:
    r = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.max_episodes_rendered=-1", f"--output_dir={tmp_path}")
    assert r.rc == 2 and "--eval.max_episodes_rendered=-1" in r.err
